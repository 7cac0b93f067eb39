# Event counts of `iosplit-trace report` against the kernel's blk tracer on the
# same window, with both probe flavors at once: BTF tracepoints (BTF offsets,
# the default) and classic ones (the kernel's tracepoint format layout). The
# first disk is 512e with the seed's misaligned partition, so remaps, splits and
# merges all occur; the second has a 16-descriptor ring without indirect
# descriptors, so large writes fill it and the driver requeues (R).
disk=$(wait_for_serial oracle 10)
part=${disk}1
wait_for_block "$part" 10
requeue=$(wait_for_serial requeue 10)
{
    echo "oracle=$part"
    echo "requeue=$requeue"
    echo "requeue_dev=$(cat "/sys/block/$requeue/dev")"
} > /results/names
geometry "$disk" "$part" > /results/geometry
{
    geometry "$requeue"
    echo "virtio.features=$(cat "/sys/block/$requeue/device/features")"
} > /results/requeue.geometry
mount_tracefs
cat /sys/kernel/tracing/events/block/block_rq_issue/format > /results/format.block_rq_issue
# A 1 MiB transfer limit (common on real disks): a 1 MiB O_DIRECT write at a
# misaligned start then splits (2047 + 1 sectors), so X is exercised too.
echo 1024 > /sys/block/$disk/queue/max_sectors_kb
blk_trace_start "$disk" "$requeue"
export IOSPLIT_PROBES=classic
start_report /results/report-classic.json -d "$disk" -d "$requeue"
unset IOSPLIT_PROBES
CLASSIC_PID=$REPORT_PID
CLASSIC_OUT=$REPORT_OUT
start_report /results/report.json -d "$disk" -d "$requeue"
mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "/dev/$part"
guest-io write "/dev/$part" 0 1048576 4
guest-io aio "/dev/$part" 8388608 4096 32
guest-io aiorev "/dev/$part" 16777216 4096 32
echo 3 > /proc/sys/vm/drop_caches
dd if="/dev/$part" of=/dev/null bs=65536 count=64
# Each 1 MiB write is split by max_segments into pieces that each take most of
# the ring: the second piece finds no room and is requeued. 256 one-page
# iovecs with gaps: one segment per page whatever the guest's memory layout (a
# plain buffer was contiguous by chance in two 6.1 boots: one command, no requeue).
guest-io writev "/dev/$requeue" 0 4096 256 16
sync
sleep 2
stop_report
REPORT_PID=$CLASSIC_PID
REPORT_OUT=$CLASSIC_OUT
stop_report
blk_trace_stop /results/blk.trace "$disk" "$requeue"

# Then Debian's blktrace (1.2.0), for the host to read with blkparse and btt
# (#47). It cannot share a disk with the ftrace blk tracer (one trace per
# queue), so it comes after it, in two captures under one live report:
# `clean`, bios that are never split (512-byte buffered bios, the odd-sized
# partition's block size, merged and written back by sync, then read back),
# the only kind btt 2.09 follows from Q to C; then the disks' own files: a
# 256 KiB cap splits each 1 MiB O_DIRECT write at the misaligned start into
# five, a fsync flushes, a split direct read, and the small ring requeues.
mount -t debugfs debugfs /sys/kernel/debug
echo 256 > /sys/block/$disk/queue/max_sectors_kb
iosplit-trace check --json > /results/bt.check.json 2> /results/bt.check.json.stderr
echo "btdisks=$disk $requeue" >> /results/names
start_report /results/report-bt.json -d "$disk" -d "$requeue"
# bt_start FILE ARGS...: blktrace ARGS in the background, once FILE (its
# first per-CPU file) exists; bt_stop: SIGINT and wait.
bt_start() {
    first=$1
    shift
    blktrace "$@" -D /results >> /results/blktrace.out 2>&1 &
    BT_PID=$!
    tries=50
    while [ ! -e "$first" ] && [ "$tries" -gt 0 ]; do
        usleep 100000
        tries=$(( tries - 1 ))
    done
    sleep 1
}
bt_stop() {
    sleep 1
    kill -INT "$BT_PID"
    wait "$BT_PID"
    echo "$?" >> /results/blktrace.rc
}
bt_start /results/clean.blktrace.0 -d "/dev/$disk" -o clean
dd if=/dev/zero of="/dev/$part" bs=4096 count=16 seek=10240 conv=notrunc
sync
echo 3 > /proc/sys/vm/drop_caches
dd if="/dev/$part" of=/dev/null bs=4096 count=16 skip=10240
bt_stop
bt_start "/results/$requeue.blktrace.0" -d "/dev/$disk" -d "/dev/$requeue"
guest-io write "/dev/$part" 33554432 1048576 4
dd if=/dev/zero of="/dev/$part" bs=4096 count=16 seek=12288 conv=notrunc,fsync
dd if="/dev/$part" of=/dev/null bs=1048576 count=1 skip=32 iflag=direct
guest-io writev "/dev/$requeue" 0 4096 256 4
sync
bt_stop
stop_report

# blktrace protocol v2 (#49): one fixed workload on the 512e disk (two runs of
# two 1 MiB O_DIRECT writes at the misaligned start, each split in five by the
# 256 KiB cap, and guest-io's fsync), captured twice. First by Debian sid's
# blktrace 1.3.0, which sets up with BLKTRACESETUP: version 7 records. Then by
# `guest-io blktrace2`, with BLKTRACESETUP2 (Linux 6.19 on): version 8
# records, which the host imports and counts against the first capture and
# blkparse 1.3.0's text of it. Kernels before 6.19 refuse BLKTRACESETUP2:
# guest-io writes the refusal and its errno to blktrace2.out and exits 3, with
# no fallback. The ftrace blk tracer cannot run alongside (one trace per queue).
v2_workload() {
    guest-io write "/dev/$part" 50331648 1048576 2
    guest-io write "/dev/$part" 52428800 1048576 2
}
# started FILE PATTERN: wait up to 10 s for PATTERN in FILE (or FILE, without one).
started() {
    tries=100
    while [ "$tries" -gt 0 ]; do
        if [ -z "$2" ]; then
            [ -e "$1" ] && break
        else
            grep -qE "$2" "$1" 2>/dev/null && break
        fi
        usleep 100000
        tries=$(( tries - 1 ))
    done
    sleep 1
}
echo "v2disk=$disk" >> /results/names
blktrace-1.3 -d "/dev/$disk" -o v7 -D /results > /results/blktrace13.out 2>&1 &
BT_PID=$!
started /results/v7.blktrace.0
v2_workload
sleep 1
kill -INT "$BT_PID"
wait "$BT_PID"
echo "$?" > /results/blktrace13.rc
guest-io blktrace2 "/dev/$disk" /results/v2 60 > /results/blktrace2.out 2> /results/blktrace2.err &
BT2_PID=$!
started /results/blktrace2.out "blktrace2_started=1|blktrace2_setup=refused"
# The live report over the same window: the capture's twin, by our probes.
start_report /results/report-v2.json -d "$disk"
v2_workload
sleep 1
stop_report
kill -INT "$BT2_PID" 2>/dev/null
wait "$BT2_PID"
echo "blktrace2_rc=$?" >> /results/blktrace2.out

# Tag waits (block_rq_tag_wait, 7.2+): 4 scheduler tags and no merging, then
# 64 adjacent 4 KiB direct writes in one io_submit, so submitters wait for
# a tag. The kernel's own event lines, counted in the trace buffer, are the
# oracle for the report's tag_waits. Kernels without the tracepoint must
# report none.
tw=/sys/kernel/tracing/events/block/block_rq_tag_wait
q=/sys/block/$disk/queue
old_sched=$(sed -n 's/.*\[\(.*\)\].*/\1/p' $q/scheduler)
old_nr=$(cat $q/nr_requests)
old_nomerges=$(cat $q/nomerges)
echo mq-deadline > $q/scheduler
echo 4 > $q/nr_requests
echo 2 > $q/nomerges
{
    echo "scheduler=$(cat $q/scheduler)"
    echo "nr_requests=$(cat $q/nr_requests)"
    echo "tracepoint=$([ -d $tw ] && echo yes || echo no)"
} > /results/tagwait.setup
if [ -d $tw ]; then
    echo > /sys/kernel/tracing/trace
    echo 1 > $tw/enable
    # blk_trace_stop left the buffer off.
    echo 1 > /sys/kernel/tracing/tracing_on
fi
start_report /results/report-tagwait.json -d "$disk"
guest-io aio "/dev/$part" 41943040 4096 64
sync
sleep 1
stop_report
if [ -d $tw ]; then
    echo 0 > /sys/kernel/tracing/tracing_on
    echo 0 > $tw/enable
    grep block_rq_tag_wait /sys/kernel/tracing/trace > /results/tagwait.trace
    echo > /sys/kernel/tracing/trace
fi
echo "$old_nomerges" > $q/nomerges
echo "$old_nr" > $q/nr_requests
echo "$old_sched" > $q/scheduler
