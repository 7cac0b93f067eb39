# The seed report's three layouts (disks with serial layout1..3, one partition
# each, made by xtask), each formatted under `iosplit-trace run`; then O_DIRECT
# 1 MiB writes to layout 1 (misaligned) and layout 3 (aligned control).
for n in 1 2 3; do
    disk=$(wait_for_serial layout$n 10)
    part=${disk}1
    wait_for_block "$part" 10
    echo "layout$n=$part" >> /results/names
    geometry "$disk" "$part" > /results/layout$n.geometry
    bounded 60 iosplit-trace check "$disk" --json > /results/layout$n.check.json \
        2> /results/layout$n.check.json.stderr
    bounded 90 iosplit-trace run --json -o /results/layout$n.run.json -- \
        mkfs.ext4 -F -E lazy_itable_init=0,lazy_journal_init=0 "/dev/$part" \
        > /results/layout$n.run.stdout 2> /results/layout$n.run.json.stderr
    echo $? > /results/layout$n.run.rc
done
for n in 1 3; do
    part=$(sed -n "s/^layout$n=//p" /results/names)
    disk=${part%1}
    # A 1 MiB transfer limit (common on real disks): on the misaligned layout a
    # 1 MiB write then splits at the physical-block boundary (2047 + 1 sectors).
    echo 1024 > /sys/block/$disk/queue/max_sectors_kb
    echo "disk.max_sectors_kb=$(cat /sys/block/$disk/queue/max_sectors_kb)" >> /results/layout$n.geometry
    blk_trace_start "$disk"
    start_report /results/layout$n.direct.json -d "$part"
    # From one huge page: the only splits left are the ones the layout causes.
    guest-io hugewrite "/dev/$part" 0 1048576 8
    sleep 1
    stop_report
    blk_trace_stop /results/layout$n.direct.trace "$disk"
done
