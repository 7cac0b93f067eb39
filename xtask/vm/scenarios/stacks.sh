# Device-mapper stacks over one partition. dm-linear: each bio to dm-0 is
# remapped twice (dm-0 -> vda1 -> vda). The report's event counts must match the blk tracer on both queues,
# and `run` must follow the command's bios on dm-0 to the commands on vda.
load_module dm_mod
disk=$(wait_for_serial stacked 10)
part=${disk}1
wait_for_block "$part" 10
size=$(cat /sys/class/block/$part/size)
export DM_DISABLE_UDEV=1
dmsetup create vmtest-linear --table "0 $size linear /dev/$part 0"
dm=$(dmsetup info -c --noheadings -o blkdevname vmtest-linear | tr -d " ")
wait_for_block "$dm" 10
echo "dm=$dm" > /results/names
echo "dm_dev=$(cat /sys/class/block/$dm/dev)" >> /results/names
echo "part=$part" >> /results/names
echo "disk=$disk" >> /results/names
{ echo "dm.target=$(dmsetup table vmtest-linear | awk '{print $3}')"; geometry "$dm"; } > /results/dm.geometry
blk_trace_start "$dm" "$disk"
start_report /results/report.json -d "$dm" -d "$disk"
guest-io write "/dev/$dm" 0 1048576 4
mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "/dev/$dm"
sync
sleep 2
stop_report
blk_trace_stop /results/blk.trace "$dm" "$disk"
bounded 60 iosplit-trace run --json -o /results/run.json -- guest-io write "/dev/$dm" 0 1048576 4 \
    2> /results/run.json.stderr
echo $? > /results/run.rc

# A second table over the same partition whose data starts 3 sectors in, as
# a hand-made or old LVM layout would: 2560 bytes short of a 4 KiB physical
# block. `check` and `run -- mkfs.ext4` must name it (mkfs itself warns of
# the kernel's stacked alignment_offset); then the table is reloaded with the
# offset the finding proposes, and the same mkfs runs again.
offset_size=$(( (size - 8) / 8 * 8 ))
dmsetup create vmtest-offset --table "0 $offset_size linear /dev/$part 3"
off=$(dmsetup info -c --noheadings -o blkdevname vmtest-offset | tr -d " ")
wait_for_block "$off" 10
echo "offset_dm=$off" >> /results/names
bounded 30 iosplit-trace check --json -o /results/check.json > /dev/null 2> /results/check.json.stderr
bounded 30 iosplit-trace check "$off" > /results/check.txt 2>&1
bounded 120 iosplit-trace run --json -o /results/run-offset.json -- \
    mkfs.ext4 -F -E lazy_itable_init=0,lazy_journal_init=0 "/dev/$off" \
    > /results/mkfs-offset.out 2> /results/run-offset.json.stderr
dmsetup suspend vmtest-offset
dmsetup reload vmtest-offset --table "0 $offset_size linear /dev/$part 8"
dmsetup resume vmtest-offset
bounded 30 iosplit-trace check --json -o /results/check-fixed.json > /dev/null 2> /results/check-fixed.json.stderr
bounded 120 iosplit-trace run --json -o /results/run-offset-fixed.json -- \
    mkfs.ext4 -F -E lazy_itable_init=0,lazy_journal_init=0 "/dev/$off" \
    > /results/mkfs-offset-fixed.out 2> /results/run-offset-fixed.json.stderr
dmsetup remove vmtest-offset

# Failed I/O through a stack: the first 4 MiB of vmtest-error map onto the
# partition, the next 4 MiB onto dm-error. 8 good writes, then 4 dd writes
# into the error half; the blk tracer's C status is the oracle.
printf '0 8192 linear /dev/%s 0\n8192 8192 error\n' "$part" | dmsetup create vmtest-error
err=$(dmsetup info -c --noheadings -o blkdevname vmtest-error | tr -d " ")
wait_for_block "$err" 10
echo "error_dm=$err" >> /results/names
echo "error_dev=$(cat /sys/class/block/$err/dev)" >> /results/names
blk_trace_start "$err" "$disk"
start_report /results/report-error.json -d "$err" -d "$disk"
guest-io write "/dev/$err" 0 65536 8
for block in 64 65 66 67; do
    dd if=/dev/zero of="/dev/$err" bs=64k count=1 seek=$block oflag=direct 2>> /results/dd-error.stderr
    echo "dd seek=$block rc=$?" >> /results/dd-error.rc
done
sleep 1
stop_report
blk_trace_stop /results/blk-error.trace "$err" "$disk"
bounded 60 iosplit-trace run --json -o /results/run-error.json -- \
    dd if=/dev/zero of="/dev/$err" bs=64k count=1 seek=70 oflag=direct 2> /results/run-error.json.stderr
echo $? > /results/run-error.rc
dmsetup remove vmtest-error

# dm-crypt with 512 and 4096-byte encryption sectors, loaded as a table with
# the null cipher: the same clone-and-resubmit write path as a real cipher,
# without the cost of one under emulation. 4 writes of 1 MiB and 64 of
# 4 KiB (O_DIRECT) each; `run -- dd` of 4 KiB writes follows them to vda.
load_module dm_crypt
load_module crypto_null
load_module ecb
crypt_size=$(( (size - 8) / 8 * 8 ))
for ss in 512 4096; do
    name=vmtest-crypt$ss
    dmsetup create $name --table "0 $crypt_size crypt cipher_null-ecb - 0 /dev/$part 0 1 sector_size:$ss"
    crypt=$(dmsetup info -c --noheadings -o blkdevname $name | tr -d " ")
    wait_for_block "$crypt" 10
    echo "crypt$ss=$crypt" >> /results/names
    echo "crypt${ss}_dev=$(cat /sys/class/block/$crypt/dev)" >> /results/names
    geometry "$crypt" > /results/crypt$ss.geometry
    bounded 30 iosplit-trace check --json -o /results/check-crypt$ss.json "$crypt" > /dev/null \
        2> /results/check-crypt$ss.json.stderr
    blk_trace_start "$crypt" "$disk"
    start_report /results/report-crypt$ss.json -d "$crypt" -d "$disk"
    guest-io write "/dev/$crypt" 0 1048576 4
    dd if=/dev/zero of="/dev/$crypt" bs=4k count=64 seek=1024 oflag=direct 2> /dev/null
    sleep 1
    stop_report
    blk_trace_stop /results/blk-crypt$ss.trace "$crypt" "$disk"
    bounded 60 iosplit-trace run --json -o /results/run-crypt$ss.json -- \
        dd if=/dev/zero of="/dev/$crypt" bs=4k count=64 oflag=direct 2> /results/run-crypt$ss.json.stderr
    dmsetup remove $name
done

# md: raid1 over two partitions at the legacy DOS sector 63, raid0 with
# 64 KiB chunks over two aligned ones, and a dm table 8 sectors (4 KiB) into
# the raid0: on the physical-block grid, off the chunk grid.
load_module raid1
load_module raid0
mirror_a=$(wait_for_serial mirror-a 10)
mirror_b=$(wait_for_serial mirror-b 10)
stripe_a=$(wait_for_serial stripe-a 10)
stripe_b=$(wait_for_serial stripe-b 10)
for member in $mirror_a $mirror_b $stripe_a $stripe_b; do wait_for_block "${member}1" 10; done
mdadm --create /dev/md0 --run --assume-clean --level=1 --raid-devices=2 --metadata=1.2 \
    "/dev/${mirror_a}1" "/dev/${mirror_b}1" > /results/mdadm.out 2>&1
mdadm --create /dev/md1 --run --level=0 --chunk=64 --raid-devices=2 --metadata=1.2 \
    "/dev/${stripe_a}1" "/dev/${stripe_b}1" >> /results/mdadm.out 2>&1
wait_for_block md0 10
wait_for_block md1 10
{
    echo "mirror_part=${mirror_a}1"
    echo "mirror_disk=$mirror_a"
    echo "mirror_b_disk=$mirror_b"
    echo "stripe_a_disk=$stripe_a"
    echo "stripe_b_disk=$stripe_b"
    echo "md0_offset=$(cat /sys/block/md0/md/dev-${mirror_a}1/offset)"
    echo "md0_dev=$(cat /sys/block/md0/dev)"
    echo "md1_dev=$(cat /sys/block/md1/dev)"
} >> /results/names
md1_size=$(cat /sys/block/md1/size)
dmsetup create vmtest-onraid --table "0 $(( (md1_size - 128) / 128 * 128 )) linear /dev/md1 8"
onraid=$(dmsetup info -c --noheadings -o blkdevname vmtest-onraid | tr -d " ")
wait_for_block "$onraid" 10
echo "onraid=$onraid" >> /results/names
bounded 30 iosplit-trace check --json -o /results/check-md.json > /dev/null 2> /results/check-md.json.stderr
bounded 30 iosplit-trace check md0 "$onraid" > /results/check-md.txt 2>&1
members="$mirror_a $mirror_b $stripe_a $stripe_b"
blk_trace_start md0 md1 $members
start_report /results/report-md.json -d md0 -d md1 $(for m in $members; do echo "-d $m"; done)
guest-io write /dev/md0 0 65536 16
guest-io write /dev/md1 0 1048576 4
sleep 1
stop_report
blk_trace_stop /results/blk-md.trace md0 md1 $members
bounded 60 iosplit-trace run --json -o /results/run-md1.json -- \
    dd if=/dev/zero of=/dev/md1 bs=64k count=16 oflag=direct 2> /results/run-md1.json.stderr
dmsetup remove vmtest-onraid
mdadm --stop /dev/md0 >> /results/mdadm.out 2>&1
mdadm --stop /dev/md1 >> /results/mdadm.out 2>&1

# dm-striped across the two aligned partitions md1 used (64 KiB chunks),
# then dm-flakey over the first: up 0 s, down 60 s, so every write fails.
stripe_size=$(( $(cat /sys/class/block/${stripe_a}1/size) / 128 * 128 ))
dmsetup create vmtest-stripe --table \
    "0 $(( stripe_size * 2 )) striped 2 128 /dev/${stripe_a}1 0 /dev/${stripe_b}1 0"
striped=$(dmsetup info -c --noheadings -o blkdevname vmtest-stripe | tr -d " ")
wait_for_block "$striped" 10
echo "striped=$striped" >> /results/names
echo "striped_dev=$(cat /sys/class/block/$striped/dev)" >> /results/names
blk_trace_start "$striped" "$stripe_a" "$stripe_b"
start_report /results/report-stripe.json -d "$striped" -d "$stripe_a" -d "$stripe_b"
guest-io write "/dev/$striped" 0 1048576 4
sleep 1
stop_report
blk_trace_stop /results/blk-stripe.trace "$striped" "$stripe_a" "$stripe_b"
dmsetup remove vmtest-stripe

load_module dm_flakey
flakey_size=$(( $(cat /sys/class/block/${stripe_a}1/size) / 8 * 8 ))
dmsetup create vmtest-flakey --table "0 $flakey_size flakey /dev/${stripe_a}1 0 0 60"
flakey=$(dmsetup info -c --noheadings -o blkdevname vmtest-flakey | tr -d " ")
wait_for_block "$flakey" 10
echo "flakey=$flakey" >> /results/names
echo "flakey_dev=$(cat /sys/class/block/$flakey/dev)" >> /results/names
blk_trace_start "$flakey" "$stripe_a"
start_report /results/report-flakey.json -d "$flakey" -d "$stripe_a"
for block in 0 1 2 3 4 5; do
    dd if=/dev/zero of="/dev/$flakey" bs=64k count=1 seek=$block oflag=direct 2> /dev/null
done
sleep 1
stop_report
blk_trace_stop /results/blk-flakey.trace "$flakey" "$stripe_a"
dmsetup remove vmtest-flakey
