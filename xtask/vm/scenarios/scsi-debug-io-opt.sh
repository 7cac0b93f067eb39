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
for part in sda1 sda2 sda3; do
    guest-io statx "/dev/$part" > "/results/$part.statx" 2> "/results/$part.statx.stderr"
    # 4 untorn writes of 16 KiB at 64 KiB into the partition (aligned to their size).
    guest-io atomic "/dev/$part" 65536 16384 4 > "/results/$part.atomic" 2> "/results/$part.atomic.stderr"
    echo "rc=$?" >> "/results/$part.atomic"
done
bounded 60 iosplit-trace check sda --json > /results/check.json 2> /results/check.json.stderr
echo $? > /results/check.rc
bounded 60 iosplit-trace check sda > /results/check.txt 2>&1
