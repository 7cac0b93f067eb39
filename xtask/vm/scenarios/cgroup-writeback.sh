# cgroup v2 writeback attribution (issue #11). cgroup2 with +io +memory and two
# cgroups: in /a, dd writes a file buffered on ext4 and exits with its pages
# still dirty; `sync` from the root cgroup then has the flusher (a kworker)
# write them. In /b, guest-io writes another file with O_DIRECT. xtask checks
# that the writeback's bytes are charged to /a although no process of /a
# issued them, and that the process view names a kernel thread, not dd.
load_module crc32c_generic
load_module ext4
disk=$(wait_for_serial cgwb 10)
mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "/dev/$disk"
mount -t ext4 "/dev/$disk" /mnt

cg=/sys/fs/cgroup
mount -t cgroup2 cgroup2 "$cg"
echo "+io +memory" > "$cg/cgroup.subtree_control"
mkdir "$cg/a" "$cg/b"
cat "$cg/cgroup.subtree_control" > /results/subtree_control

# The files exist before tracing, so opening them reads no inode or bitmap
# block inside the window: the writers' own I/O is only their data.
touch /mnt/a.dat /mnt/b.dat
sync
{
    echo "disk=$disk"
    echo "disk_dev=$(cat "/sys/block/$disk/dev")"
    echo "a_id=$(stat -c %i "$cg/a")"
    echo "b_id=$(stat -c %i "$cg/b")"
    echo "a_ino=$(stat -c %i /mnt/a.dat)"
    echo "b_ino=$(stat -c %i /mnt/b.dat)"
} > /results/names

start_report /results/report.json -d "$disk" --owners
first_pid=$REPORT_PID
first_out=$REPORT_OUT
# The same window seen through the kernel-side filter: --cgroup /a must keep
# the kworker's writeback (charged to /a) and drop /b's direct writes.
start_report /results/report-a.json -d "$disk" --cgroup /a

# /b: 4 MiB direct, 1 MiB at a time (guest-io fsyncs at the end).
sh -c "echo \$\$ > $cg/b/cgroup.procs && exec guest-io write /mnt/b.dat 0 1048576 4" &
direct_pid=$!
wait "$direct_pid"
echo "direct_rc=$?" >> /results/names
echo "direct_pid=$direct_pid" >> /results/names

# /a: 8 MiB buffered, no fsync; dd exits with the pages dirty in the page cache.
# conv=notrunc: ext4 (auto_da_alloc) writes a file truncated to 0 and rewritten
# back on close, from the closing process, and dd would then issue it itself.
sh -c "echo \$\$ > $cg/a/cgroup.procs && exec dd if=/dev/zero of=/mnt/a.dat bs=65536 count=128 conv=notrunc" &
writer_pid=$!
wait "$writer_pid"
echo "writer_rc=$?" >> /results/names
echo "writer_pid=$writer_pid" >> /results/names
grep -E '^file_(dirty|writeback) ' "$cg/a/memory.stat" | tr ' ' '=' > /results/a.before-sync
grep -E '^(Dirty|Writeback):' /proc/meminfo | tr -d ' ' | tr ':' '=' >> /results/a.before-sync

# Flushed from the root cgroup by someone else.
sync &
sync_pid=$!
wait "$sync_pid"
echo "sync_pid=$sync_pid" >> /results/names
grep -E '^file_(dirty|writeback) ' "$cg/a/memory.stat" | tr ' ' '=' > /results/a.after-sync
sleep 2

stop_report
REPORT_PID=$first_pid
REPORT_OUT=$first_out
stop_report
umount /mnt

# run under fio's asynchronous engines (issue #28), on the same boot: their
# io_uring tracepoints differ between 6.1 (io_uring_submit_sqe) and 6.12
# (io_uring_submit_req). xtask checks run's writes against fio's own totals.
adisk=$(wait_for_serial async 10)
echo "async_disk=$adisk" >> /results/names
for case in uring:io_uring: uringfixed:io_uring:--fixedbufs=1,--registerfiles=1 aio:libaio:; do
    name=${case%%:*}
    rest=${case#*:}
    engine=${rest%%:*}
    extra=$(echo "${rest#*:}" | tr ',' ' ')
    # shellcheck disable=SC2086
    iosplit-trace run --json -o "/results/$name.json" -- fio --name="$name" \
        --filename="/dev/$adisk" --rw=write --bs=64k --direct=1 --ioengine="$engine" \
        --iodepth=8 --size=16M $extra --output-format=json --output="/results/$name.fio.json" \
        > "/results/$name.stdout" 2> "/results/$name.stderr"
    echo "$name=$?" >> /results/async.rc
done
