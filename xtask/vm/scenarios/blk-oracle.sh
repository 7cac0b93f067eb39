# Event counts of `iosplit-trace report` against the kernel's blk tracer on the
# same window, with both probe flavors at once: raw tracepoints (BTF offsets,
# the default) and classic ones (the 6.1 tracepoint format layout). The disk is 512e with the seed's
# misaligned partition, so remaps, splits and merges all occur.
disk=$(wait_for_serial oracle 10)
part=${disk}1
wait_for_block "$part" 10
echo "oracle=$part" > /results/names
geometry "$disk" "$part" > /results/geometry
mount_tracefs
cat /sys/kernel/tracing/events/block/block_rq_issue/format > /results/format.block_rq_issue
# A 1 MiB transfer limit (common on real disks): a 1 MiB O_DIRECT write at a
# misaligned start then splits (2047 + 1 sectors), so X is exercised too.
echo 1024 > /sys/block/$disk/queue/max_sectors_kb
blk_trace_start "$disk"
export IOSPLIT_PROBES=classic
start_report /results/report-classic.json -d "$disk"
unset IOSPLIT_PROBES
CLASSIC_PID=$REPORT_PID
CLASSIC_OUT=$REPORT_OUT
start_report /results/report.json -d "$disk"
mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "/dev/$part"
guest-io write "/dev/$part" 0 1048576 4
guest-io aio "/dev/$part" 8388608 4096 32
guest-io aiorev "/dev/$part" 16777216 4096 32
echo 3 > /proc/sys/vm/drop_caches
dd if="/dev/$part" of=/dev/null bs=65536 count=64
sync
sleep 2
stop_report
REPORT_PID=$CLASSIC_PID
REPORT_OUT=$CLASSIC_OUT
stop_report
blk_trace_stop /results/blk.trace "$disk"
