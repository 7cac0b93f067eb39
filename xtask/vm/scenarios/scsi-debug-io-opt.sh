# scsi_debug with 4 KiB physical blocks and a 128 KiB optimal transfer size.
# Partition 1 starts at 2056 (4 KiB-aligned, not 128 KiB); partition 2 at
# 264192 (128 KiB-aligned) is the control.
# Untorn writes (#50): where this kernel's scsi_debug has the atomic write
# parameters (modinfo says; 6.11 added them), the disk offers atomic writes
# of 4 KiB (8 blocks) to 64 KiB (128 blocks). Partition 3 at 206849 is off
# that grid and loses them; 1 and 2 keep them. statx and pwritev2(RWF_ATOMIC)
# on each partition are the oracles for check's verdicts.
load_module crct10dif_generic
load_module crc64_rocksoft_generic
sd_ko=$(tail -n 1 /etc/modules/scsi_debug)
# busybox modinfo reads modules.dep first; the initramfs has none (load_module
# follows /etc/modules), and an empty one leaves it reading the path given.
dep=/lib/modules/$(uname -r)/modules.dep
[ -e "$dep" ] || : > "$dep"
modinfo -F parm "$sd_ko" > /results/scsi_debug.parm 2> /results/scsi_debug.parm.stderr
atomic=
if grep -q '^atomic_wr:' /results/scsi_debug.parm; then
    atomic="atomic_wr=1 atomic_wr_gran=8 atomic_wr_align=8 atomic_wr_max_length=128"
fi
echo "atomic_params=$atomic" > /results/atomic.params
# shellcheck disable=SC2086 # the parameters are words
load_module scsi_debug dev_size_mb=256 sector_size=512 physblk_exp=3 opt_blks=256 $atomic
load_module sd_mod
wait_for_block sda 20
printf 'label: dos\nstart=2056, size=131072, type=83\nstart=264192, size=131072, type=83\nstart=206849, size=57336, type=83\n' \
    | sfdisk -q /dev/sda
wait_for_block sda1 10
wait_for_block sda2 10
wait_for_block sda3 10
echo "p1=sda1" > /results/names
echo "p2=sda2" >> /results/names
geometry sda sda1 > /results/sda1.geometry
geometry sda sda2 > /results/sda2.geometry
for key in unit_min unit_max max boundary; do
    file=/sys/block/sda/queue/atomic_write_${key}_bytes
    [ -r "$file" ] && echo "$key=$(cat "$file")"
done > /results/sda.atomic_sysfs
guest-io statx /dev/sda > /results/sda.statx 2>&1
# Each partition's untorn writes under `run`, with the blk tracer on sda as
# the oracle for the commands they became.
blk_trace_start sda
for part in sda1 sda2 sda3; do
    guest-io statx "/dev/$part" > "/results/$part.statx" 2> "/results/$part.statx.stderr"
    # 64 untorn writes of 16 KiB from 64 KiB into the partition (aligned to their size).
    bounded 60 iosplit-trace run --json -o "/results/$part.atomic.run.json" -- \
        guest-io atomic "/dev/$part" 65536 16384 64 > "/results/$part.atomic" 2> "/results/$part.atomic.stderr"
    echo "rc=$?" >> "/results/$part.atomic"
done
blk_trace_stop /results/atomic.blk.trace sda
# Plain O_DIRECT writes on the partition that lost untorn writes: run must
# say why a program that wanted them got none.
bounded 60 iosplit-trace run --json -o /results/sda3.direct.run.json -- \
    guest-io write /dev/sda3 0 16384 4 2> /results/sda3.direct.run.json.stderr
# Untorn writes through a stack: dm-linear over sda1, then md raid0 (64 KiB
# chunks) over sda1 and sda2 (dm holds sda1, so one after the other).
# statx says what each offers; check's verdict, run's per-write proof and the
# blk tracer's commands on sda are judged against it. Each is taken down
# before the last checks.
# atomic_stack NAME: audit, statx and 64 untorn writes under run on /dev/NAME.
atomic_stack() {
    stack=$1
    bounded 60 iosplit-trace check --json > "/results/$stack.check.json" 2> "/results/$stack.check.json.stderr"
    for key in unit_min unit_max max boundary; do
        file=/sys/block/$stack/queue/atomic_write_${key}_bytes
        [ -r "$file" ] && echo "$key=$(cat "$file")"
    done > "/results/$stack.atomic_sysfs"
    guest-io statx "/dev/$stack" > "/results/$stack.statx" 2> "/results/$stack.statx.stderr"
    blk_trace_start sda
    bounded 60 iosplit-trace run --json -o "/results/$stack.atomic.run.json" -- \
        guest-io atomic "/dev/$stack" 65536 16384 64 > "/results/$stack.atomic" 2> "/results/$stack.atomic.stderr"
    echo "rc=$?" >> "/results/$stack.atomic"
    blk_trace_stop "/results/$stack.atomic.blk.trace" sda
}
if [ -n "$atomic" ]; then
    load_module dm_mod
    load_module raid0
    export DM_DISABLE_UDEV=1
    size=$(cat /sys/class/block/sda1/size)
    dmsetup create vmtest-atomic --noudevsync --table "0 $size linear /dev/sda1 0"
    dmsetup mknodes > /dev/null 2>&1
    dm=$(dmsetup info -c --noheadings -o blkdevname vmtest-atomic | tr -d " ")
    wait_for_block "$dm" 10
    echo "atomic_dm=$dm" > /results/atomic-stack.names
    atomic_stack "$dm"
    dmsetup remove vmtest-atomic
    mdadm --create /dev/md0 --run --level=0 --chunk=64 --raid-devices=2 --metadata=1.2 \
        /dev/sda1 /dev/sda2 > /results/atomic-md.mdadm 2>&1
    md=$(basename "$(readlink -f /dev/md0)")
    wait_for_block "$md" 10
    echo "atomic_md=$md" >> /results/atomic-stack.names
    atomic_stack "$md"
    mdadm --stop /dev/md0 >> /results/atomic-md.mdadm 2>&1
    mdadm --zero-superblock /dev/sda1 /dev/sda2 >> /results/atomic-md.mdadm 2>&1
fi
bounded 60 iosplit-trace check sda --json > /results/check.json 2> /results/check.json.stderr
echo $? > /results/check.rc
bounded 60 iosplit-trace check sda > /results/check.txt 2>&1

# Where max_sectors_kb comes from (#49): the guest's own numbers and kernel
# (check.json above says what check made of them), then 1 MiB O_DIRECT
# writes to sda2 under a 128 KiB cap, and again under the raise
# the split finding proposes (or min(max_hw_sectors_kb, 1024) when it
# proposes none and that is a raise); whether a raise outlives sd's rescan;
# the cap put back at the end.
q=/sys/block/sda/queue
maxsec_before=$(cat $q/max_sectors_kb)
maxsec_hw=$(cat $q/max_hw_sectors_kb)
{
    echo "osrelease=$(uname -r)"
    echo "max_sectors_kb=$maxsec_before"
    echo "max_hw_sectors_kb=$maxsec_hw"
    echo "optimal_io_size=$(cat $q/optimal_io_size)"
} > /results/maxsec.values
# Where this kernel's cap holds a 1 MiB write whole (6.11 on), set the
# cap to io_opt by hand, as sd's rule did before 6.11: the split, its
# finding (the source then no kernel default) and the what-if on every line.
if [ "$maxsec_before" -ge 1024 ]; then
    echo 128 > $q/max_sectors_kb
    echo "user_set=128" >> /results/maxsec.values
fi
echo "max_sectors_kb_run=$(cat $q/max_sectors_kb)" >> /results/maxsec.values
bounded 120 iosplit-trace run --json -o /results/maxsec.run.json -- \
    guest-io write /dev/sda2 0 1048576 4 > /results/maxsec.run.stdout 2> /results/maxsec.run.stderr
echo "run_rc=$?" >> /results/maxsec.values
maxsec_to=$(grep -o '"proposed_max_sectors_kb": *[0-9]*' /results/maxsec.run.json | head -n 1 | grep -o '[0-9]*$')
if [ -z "$maxsec_to" ]; then
    maxsec_to=1024
    [ "$maxsec_hw" -lt 1024 ] && maxsec_to=$maxsec_hw
    [ "$maxsec_to" -le "$(cat $q/max_sectors_kb)" ] && maxsec_to=$(cat $q/max_sectors_kb)
fi
echo "$maxsec_to" > $q/max_sectors_kb
echo "raise_rc=$?" >> /results/maxsec.values
echo "raised_to=$maxsec_to" >> /results/maxsec.values
echo "max_sectors_kb_raised=$(cat $q/max_sectors_kb)" >> /results/maxsec.values
bounded 120 iosplit-trace run --json -o /results/maxsec-fixed.run.json -- \
    guest-io write /dev/sda2 0 1048576 4 > /results/maxsec-fixed.run.stdout 2> /results/maxsec-fixed.run.stderr
echo "fixed_rc=$?" >> /results/maxsec.values
echo 1 > /sys/block/sda/device/rescan
echo "rescan_rc=$?" >> /results/maxsec.values
echo "max_sectors_kb_after_rescan=$(cat $q/max_sectors_kb)" >> /results/maxsec.values
echo "$maxsec_before" > $q/max_sectors_kb
echo "max_sectors_kb_restored=$(cat $q/max_sectors_kb)" >> /results/maxsec.values

# The fix atomic_writes_lost proposed, applied: partition 3 recreated at
# 206856 (the next start on the 8-sector grid), the same untorn writes. statx,
# check and run must then agree it keeps them.
if [ -n "$atomic" ]; then
    echo "206856,57328,83" | sfdisk -q -N 3 --no-reread /dev/sda > /results/sda3-fixed.sfdisk 2>&1
    blockdev --rereadpt /dev/sda >> /results/sda3-fixed.sfdisk 2>&1
    wait_for_block sda3 10
    echo "start=$(cat /sys/class/block/sda3/start)" > /results/sda3-fixed.geometry
    guest-io statx /dev/sda3 > /results/sda3-fixed.statx 2> /results/sda3-fixed.statx.stderr
    bounded 60 iosplit-trace run --json -o /results/sda3-fixed.atomic.run.json -- \
        guest-io atomic /dev/sda3 65536 16384 64 > /results/sda3-fixed.atomic 2> /results/sda3-fixed.atomic.stderr
    echo "rc=$?" >> /results/sda3-fixed.atomic
    bounded 60 iosplit-trace check sda --json > /results/sda3-fixed.check.json 2> /results/sda3-fixed.check.json.stderr
fi
