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
