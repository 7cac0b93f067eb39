# What a fix buys in time, on disks throttled like cloud disks (xtask sets
# qemu's throttling, with its request merging off so each command counts):
# `iops` takes 200 commands/s whatever their size, `bw` 8 MiB/s whatever the
# commands; `seed` and `seedfix` are the seed report's layouts 1 and 3 at
# 200 commands/s, `nvseed` and `nvfix` the same on NVMe; `mis` has its
# partition at sector 2049, off the 4 KiB grid, at 200 commands/s. Each case
# runs a workload under `run` with the cause in place, applies the fix the
# diagnosis names, runs the same workload again, and leaves both reports and
# `compare`'s text for xtask.

# run_case NAME PART CMD...: the workload under run, its report in NAME.json.
run_case() {
    name=$1
    shift 2
    bounded 240 iosplit-trace run --json -o "/results/$name.json" -- "$@" \
        > "/results/$name.stdout" 2> "/results/$name.stderr"
    echo $? > "/results/$name.rc"
}

# proposed KEY FILE: the first numeric value of KEY in a JSON report.
proposed() {
    grep -o "\"$1\": *[0-9]*" "$2" | head -n 1 | grep -o '[0-9]*$'
}

# split_case NAME PART WORKLOAD: WORKLOAD under a 32 KiB transfer limit, then
# under the max_sectors_kb its report proposes, and compare's text of the two.
split_case() {
    split=$1
    limits=/sys/block/${2%1}/queue
    echo 32 > "$limits/max_sectors_kb"
    run_case "$split.before" "$2" sh -c "$3"
    fix=$(proposed proposed_max_sectors_kb "/results/$split.before.json")
    echo "$split.fix=${fix:-none}" >> /results/names
    [ -n "$fix" ] && echo "$fix" > "$limits/max_sectors_kb"
    run_case "$split.after" "$2" sh -c "$3"
    iosplit-trace compare "/results/$split.before.json" "/results/$split.after.json" \
        > "/results/$split.compare" 2>&1
    echo 1024 > "$limits/max_sectors_kb"
}

load_module crct10dif_generic
load_module crc64_rocksoft_generic
load_module nvme
for serial in iops bw seed seedfix mis nvseed nvfix; do
    disk=$(wait_for_serial $serial 10)
    # NVMe names its partitions nvme0n1p1.
    case $disk in *[0-9]) part=${disk}p1 ;; *) part=${disk}1 ;; esac
    wait_for_block "$part" 10
    echo "$serial=$part" >> /results/names
    echo "$serial.disk=$disk" >> /results/names
    geometry "$disk" "$part" > "/results/$serial.geometry"
done

for serial in iops bw; do
    part=$(sed -n "s/^$serial=//p" /results/names)
    disk=${part%1}
    q=/sys/block/$disk/queue
    # Split: 512 KiB direct writes from 128 separate pages under a 32 KiB
    # transfer limit, beside 4 KiB ones (two sizes, so the fit can tell a
    # command's cost from its bytes'). 128 segments stay under the disk's
    # 254 however the guest's pages fall: 1 MiB of 256 pages went out as
    # one command or as two, by the memory layout of the boot.
    # 64 MiB, so the throttle's burst (avg/10 commands after idle, as cloud
    # disks spend credits) is a small part of the time before and after.
    workload="guest-io writev /dev/$part 0 4096 128 128 && guest-io write /dev/$part 67108864 4096 256"
    split_case "$serial.split" "$part" "$workload"

    # The same split from a contiguous buffer: 1 MiB direct writes from a
    # huge page, one vector each, where 256 separate pages would need two
    # commands under the disk's 254 segments. On iops only (bw's time is
    # the bytes', as the split case above shows).
    if [ "$serial" = iops ]; then
        workload="guest-io hugewrite /dev/$part 0 1048576 64 && guest-io write /dev/$part 67108864 4096 256"
        split_case "$serial.huge" "$part" "$workload"
    fi

    # Merges switched off: adjacent 4 KiB and 16 KiB writes submitted together.
    # 8 MiB on bw, past its burst (avg/10 after idle); 1 MiB on iops.
    n=1; [ "$serial" = bw ] && n=8
    workload="guest-io aio /dev/$part 0 4096 $((128 * n)) && guest-io aio /dev/$part $((1048576 * n)) 16384 $((32 * n))"
    echo 2 > $q/nomerges
    run_case "$serial.nomerges.before" "$part" sh -c "$workload"
    echo 0 > $q/nomerges
    run_case "$serial.nomerges.after" "$part" sh -c "$workload"
    iosplit-trace compare "/results/$serial.nomerges.before.json" "/results/$serial.nomerges.after.json" \
        > "/results/$serial.nomerges.compare" 2>&1
done

# A misaligned start: 256 KiB direct writes (64 separate pages) under a
# 256 KiB transfer limit are cut once each at a physical block, beside
# 4 KiB ones (for the fit). The fix, the same workload on a partition at
# sector 2048 of the same kind of disk (`iops`).
for serial in mis iops; do
    part=$(sed -n "s/^$serial=//p" /results/names)
    q=/sys/block/${part%1}/queue
    echo 256 > $q/max_sectors_kb
    run_case "$serial.misaligned" "$part" sh -c \
        "guest-io writev /dev/$part 0 4096 64 256 && guest-io write /dev/$part 100663296 4096 128"
    echo 1024 > $q/max_sectors_kb
done
mis=$(sed -n 's/^mis=//p' /results/names)
iops=$(sed -n 's/^iops=//p' /results/names)
iosplit-trace compare --pair "$mis=$iops" --pair "${mis%1}=${iops%1}" \
    /results/mis.misaligned.json /results/iops.misaligned.json \
    > /results/mis.misaligned.compare 2>&1

# The seed: mkfs.ext4 on layout 1 and on its fix (virtio: the seed's
# layout 3; NVMe: the layout the fix names, of the same size), then
# buffered writes through the raw partition beside direct ones: two sizes
# for the fit, each a real share of the commands. On virtio 1 MiB with
# merging off (a device that cannot merge), beside 64 KiB writes; on NVMe
# 8 MiB with merging on, where the 4 KiB virt boundary and 127 segments
# keep 512-byte bios apart or small, beside 4 KiB writes.
# mke2fs asks getrandom() for its UUIDs and hash seed, and until the
# kernel's random pool is ready, util-linux's libuuid sleeps 125 ms per try
# (up to 8): seconds of no block I/O, which made mkfs take 0.35-4.4 s from
# boot to boot. A read of /dev/random waits for the pool (and makes the
# kernel gather entropy meanwhile); how long it took is kept.
started=$(cut -d' ' -f1 /proc/uptime)
head -c 1 /dev/random > /dev/null
echo "$started $(cut -d' ' -f1 /proc/uptime)" > /results/random-pool-wait
for serial in seed seedfix nvseed nvfix; do
    part=$(sed -n "s/^$serial=//p" /results/names)
    disk=$(sed -n "s/^$serial.disk=//p" /results/names)
    run_case "$serial.mkfs" "$part" \
        mkfs.ext4 -F -E lazy_itable_init=0,lazy_journal_init=0 "/dev/$part"
    # The same run as a user reads it (the README's example), on layout 1.
    if [ "$serial" = seed ]; then
        bounded 240 iosplit-trace run -o /results/seed.mkfs.txt -- \
            mkfs.ext4 -F -E lazy_itable_init=0,lazy_journal_init=0 "/dev/$part" \
            > /dev/null 2>> /results/seed.mkfs.stderr
    fi
    case $serial in
        nv*) buffered="bs=64k count=128" direct="16777216 4096 128" ;;
        *) buffered="bs=64k count=16" direct="4194304 65536 64"
           echo 2 > "/sys/block/$disk/queue/nomerges" ;;
    esac
    run_case "$serial.dd" "$part" sh -c \
        "dd if=/dev/zero of=/dev/$part $buffered conv=fsync 2>/dev/null && guest-io write /dev/$part $direct"
    echo 0 > "/sys/block/$disk/queue/nomerges"
done
name_of() { sed -n "s/^$1=//p" /results/names; }
for pair in seed:seedfix nvseed:nvfix; do
    before=${pair%:*}
    after=${pair#*:}
    for case in mkfs dd; do
        iosplit-trace compare --pair "$(name_of "$before")=$(name_of "$after")" \
            --pair "$(name_of "$before.disk")=$(name_of "$after.disk")" \
            "/results/$before.$case.json" "/results/$after.$case.json" \
            > "/results/$before.$case.compare" 2>&1
    done
done
