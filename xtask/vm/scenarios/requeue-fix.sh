# requeued_commands and its fix, measured. Booted twice by xtask: first with
# a 16-descriptor ring without indirect descriptors (each 1 MiB direct write
# splits into 14-segment commands that fill the ring, so the next is
# requeued), then with indirect_desc=on (the fix the diagnosis names). The
# same workload runs under report and the blk tracer each time; xtask
# compares the second boot's issues with the first's `what_if`.
disk=$(wait_for_serial requeue 10)
{
    echo "requeue=$disk"
    echo "requeue_dev=$(cat "/sys/block/$disk/dev")"
} > /results/names
{
    geometry "$disk"
    echo "virtio.features=$(cat "/sys/block/$disk/device/features")"
} > /results/geometry
blk_trace_start "$disk"
start_report /results/report.json -d "$disk"
# 16 writes of 1 MiB, each from 256 pages with gaps between them: one segment
# per page whatever the physical layout, so both boots cut the same commands
# (a plain 1 MiB buffer is often partly contiguous, by chance per boot).
guest-io writev "/dev/$disk" 0 4096 256 16
sync
sleep 2
stop_report
blk_trace_stop /results/blk.trace "$disk"
