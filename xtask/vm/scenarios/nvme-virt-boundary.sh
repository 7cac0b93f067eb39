# qemu's NVMe (virt_boundary_mask 4095) against a virtio disk: 64 adjacent
# 512-byte O_DIRECT writes in one io_submit (virtio merges them, NVMe cannot),
# and 4 pwritevs of 16 x 512-byte iovecs in separate pages (NVMe splits at
# every gap). Each workload runs under its own report and blk tracer window.
load_module crct10dif_generic
load_module crc64_rocksoft_generic
load_module nvme
nvme=$(wait_for_serial vmtest-nvme 20)
control=$(wait_for_serial control 10)
echo "nvme=$nvme" > /results/names
echo "control=$control" >> /results/names
geometry "$nvme" > /results/nvme.geometry
geometry "$control" > /results/control.geometry
for pair in "nvme:$nvme" "control:$control"; do
    label=${pair%%:*}
    disk=${pair#*:}
    blk_trace_start "$disk"
    start_report /results/$label.aio.json -d "$disk"
    guest-io aio "/dev/$disk" 0 512 64
    sleep 1
    stop_report
    blk_trace_stop /results/$label.aio.trace "$disk"
    blk_trace_start "$disk"
    start_report /results/$label.writev.json -d "$disk"
    guest-io writev "/dev/$disk" 1048576 512 16 4
    sleep 1
    stop_report
    blk_trace_stop /results/$label.writev.trace "$disk"
done

# NVMe passthrough: fio's io_uring_cmd engine writes 64 x 4 KiB at 1 MiB
# through the namespace's generic char device. The block tracepoints give
# these requests no range; the kernel's own nvme_setup_cmd event, traced
# beside the blk tracer, is the oracle for their LBAs.
ng=/dev/ng${nvme#nvme}
echo "ng=$ng" >> /results/names
if [ -c "$ng" ]; then
    blk_trace_start "$nvme"
    echo 1 > /sys/kernel/tracing/events/nvme/nvme_setup_cmd/enable
    start_report /results/nvme.passthrough.json -d "$nvme"
    bounded 60 fio --name=passthrough --filename="$ng" --ioengine=io_uring_cmd --cmd_type=nvme \
        --rw=write --bs=4k --offset=1m --size=256k --iodepth=1 \
        --output-format=json --output=/results/fio-passthrough.json \
        > /results/fio-passthrough.out 2>&1
    echo $? > /results/fio-passthrough.rc
    sleep 1
    stop_report
    echo 0 > /sys/kernel/tracing/events/nvme/nvme_setup_cmd/enable
    blk_trace_stop /results/nvme.passthrough.trace "$nvme"
    # The same writes at 2 MiB under run: each SQE followed to its command.
    bounded 90 iosplit-trace run --json -o /results/run-passthrough.json -- \
        fio --name=passthrough --filename="$ng" --ioengine=io_uring_cmd --cmd_type=nvme \
        --rw=write --bs=4k --offset=2m --size=256k --iodepth=1 \
        --output-format=json --output=/results/fio-run-passthrough.json \
        > /results/run-passthrough.out 2>&1
    echo $? > /results/run-passthrough.rc
else
    echo "no $ng" > /results/fio-passthrough.rc
fi
