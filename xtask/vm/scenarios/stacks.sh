# One more traced pass on the classic tracepoints (format-file offsets):
# NAME, the devices, then the work. Its report and blk trace are
# report-NAME.json and blk-NAME.trace.
classic_pass() {
    name=$1
    devices=$2
    shift 2
    export IOSPLIT_PROBES=classic
    blk_trace_start $devices
    start_report "/results/report-$name.json" $(for d in $devices; do echo "-d $d"; done)
    "$@"
    sleep 1
    stop_report
    blk_trace_stop "/results/blk-$name.trace" $devices
    unset IOSPLIT_PROBES
}

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
    if [ "$ss" = 4096 ]; then
        classic_pass crypt-classic "$crypt $disk" guest-io write "/dev/$crypt" 0 1048576 4
    fi
    bounded 60 iosplit-trace run --json -o /results/run-crypt$ss.json -- \
        dd if=/dev/zero of="/dev/$crypt" bs=4k count=64 oflag=direct 2> /results/run-crypt$ss.json.stderr
    if [ "$ss" = 4096 ]; then
        # dm-crypt's own cap on a write (6.11+: 128 KiB): 8 writes of 1 MiB,
        # then again with max_write_size at 1 MiB and the table reloaded,
        # which must not lift it (the parameter only lowers the cap).
        bounded 60 iosplit-trace run --json -o /results/run-crypt-big.json -- \
            dd if=/dev/zero of="/dev/$crypt" bs=1M count=8 oflag=direct 2> /results/run-crypt-big.json.stderr
        param=/sys/module/dm_crypt/parameters/max_write_size
        if [ -w "$param" ]; then
            echo 1048576 > "$param"
            dmsetup suspend $name
            dmsetup reload $name --table "0 $crypt_size crypt cipher_null-ecb - 0 /dev/$part 0 1 sector_size:$ss"
            dmsetup resume $name
            bounded 60 iosplit-trace run --json -o /results/run-crypt-big-fixed.json -- \
                dd if=/dev/zero of="/dev/$crypt" bs=1M count=8 oflag=direct \
                2> /results/run-crypt-big-fixed.json.stderr
            echo 0 > "$param"
        fi
    fi
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
classic_pass md-classic "md0 md1 $members" \
    sh -c "guest-io write /dev/md0 0 65536 16 && guest-io write /dev/md1 0 1048576 4"
bounded 60 iosplit-trace run --json -o /results/run-md1.json -- \
    dd if=/dev/zero of=/dev/md1 bs=64k count=16 oflag=direct 2> /results/run-md1.json.stderr
dmsetup remove vmtest-onraid
mdadm --stop /dev/md0 >> /results/mdadm.out 2>&1
mdadm --stop /dev/md1 >> /results/mdadm.out 2>&1

# The raid1 fix, applied as misaligned_stack gives it: both partitions
# recreated at sector 64, the array made again, the same writes.
for mirror in $mirror_a $mirror_b; do
    mdadm --zero-superblock "/dev/${mirror}1" >> /results/mdadm.out 2>&1
    echo "64,100000" | sfdisk -q --no-reread "/dev/$mirror" >> /results/mdadm.out 2>&1
    blockdev --rereadpt "/dev/$mirror" >> /results/mdadm.out 2>&1
done
for mirror in $mirror_a $mirror_b; do wait_for_block "${mirror}1" 10; done
echo "mirror_start_fixed=$(cat /sys/class/block/${mirror_a}1/start)" >> /results/names
mdadm --create /dev/md0 --run --assume-clean --level=1 --raid-devices=2 --metadata=1.2 \
    "/dev/${mirror_a}1" "/dev/${mirror_b}1" >> /results/mdadm.out 2>&1
wait_for_block md0 10
bounded 30 iosplit-trace check --json -o /results/check-md-fixed.json > /dev/null \
    2> /results/check-md-fixed.json.stderr
start_report /results/report-md-fixed.json -d md0 -d "$mirror_a" -d "$mirror_b"
guest-io write /dev/md0 0 65536 16
sleep 1
stop_report

# A stack whose own max_sectors is below its disks': md splits what they
# could take whole. The finding's raise is then written and the writes rerun.
echo "md0_max_hw_kb=$(cat /sys/block/md0/queue/max_hw_sectors_kb)" >> /results/names
echo 32 > /sys/block/md0/queue/max_sectors_kb
bounded 60 iosplit-trace run --json -o /results/run-md-capped.json -- \
    guest-io write /dev/md0 0 65536 16 2> /results/run-md-capped.json.stderr
raise=$(sed -n 's/.*"proposed_max_sectors_kb": *\([0-9]*\).*/\1/p' /results/run-md-capped.json | head -1)
echo "md0_raise_kb=$raise" >> /results/names
echo "${raise:-64}" > /sys/block/md0/queue/max_sectors_kb
bounded 60 iosplit-trace run --json -o /results/run-md-raised.json -- \
    guest-io write /dev/md0 0 65536 16 2> /results/run-md-raised.json.stderr
mdadm --stop /dev/md0 >> /results/mdadm.out 2>&1

# md raid5 over three partitions, 64 KiB chunks: it writes each stripe's
# data and parity as 4 KiB bios of its own, remapped from md2 (no split).
load_module crc32c_generic # libcrc32c asks the crypto API for it, not modprobe
load_module raid456
mdadm --create /dev/md2 --run --assume-clean --level=5 --chunk=64 --raid-devices=3 --metadata=1.2 \
    "/dev/${mirror_a}1" "/dev/${mirror_b}1" "/dev/${stripe_b}1" >> /results/mdadm.out 2>&1
wait_for_block md2 10
# The first open scans md2 for partitions (3 reads): before the window.
blockdev --getbsz /dev/md2 > /dev/null
echo "md2_dev=$(cat /sys/block/md2/dev)" >> /results/names
raid5_members="$mirror_a $mirror_b $stripe_b"
blk_trace_start md2 $raid5_members
start_report /results/report-raid5.json -d md2 $(for m in $raid5_members; do echo "-d $m"; done)
guest-io write /dev/md2 0 65536 16
guest-io write /dev/md2 16777216 1048576 4
sleep 1
stop_report
blk_trace_stop /results/blk-raid5.trace md2 $raid5_members
# raid5's reads skip the stripe cache (chunk_aligned_read): cut at each
# 64 KiB chunk, each piece cloned to its member. 6.1 does not trace these
# cuts (md called bio_split without trace_block_split until 22f166218f73,
# 6.18; 6.12.y has it backported): 8 reads of 512 KiB, 7 cuts each.
geometry md2 > /results/md2.geometry
blk_trace_start md2 $raid5_members
start_report /results/report-raid5-read.json -d md2 $(for m in $raid5_members; do echo "-d $m"; done)
dd if=/dev/md2 of=/dev/null bs=512k count=8 iflag=direct 2> /dev/null
sleep 1
stop_report
blk_trace_stop /results/blk-raid5-read.trace md2 $raid5_members
mdadm --stop /dev/md2 >> /results/mdadm.out 2>&1

# md raid10, 2 near copies over the same 3 members, 64 KiB chunks: more
# members than copies, so md cuts its I/O at each chunk, and 6.1 does not
# trace those cuts either (each piece is remapped to both its mirrors).
# 8 O_DIRECT writes and 8 reads of 512 KiB (128 pages, under
# max_segments), 7 cuts each.
load_module raid10
raid10_members="$mirror_a $mirror_b $stripe_b"
for member in $raid10_members; do mdadm --zero-superblock "/dev/${member}1" >> /results/mdadm.out 2>&1; done
mdadm --create /dev/md3 --run --assume-clean --level=10 --layout=n2 --chunk=64 --raid-devices=3 \
    --metadata=1.2 "/dev/${mirror_a}1" "/dev/${mirror_b}1" "/dev/${stripe_b}1" >> /results/mdadm.out 2>&1
wait_for_block md3 10
blockdev --getbsz /dev/md3 > /dev/null
echo "md3_dev=$(cat /sys/block/md3/dev)" >> /results/names
geometry md3 > /results/md3.geometry
blk_trace_start md3 $raid10_members
start_report /results/report-raid10.json -d md3 $(for m in $raid10_members; do echo "-d $m"; done)
guest-io write /dev/md3 0 524288 8
dd if=/dev/md3 of=/dev/null bs=512k count=8 iflag=direct 2> /dev/null
sleep 1
stop_report
blk_trace_stop /results/blk-raid10.trace md3 $raid10_members
mdadm --stop /dev/md3 >> /results/mdadm.out 2>&1

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
classic_pass stripe-classic "$striped $stripe_a $stripe_b" guest-io write "/dev/$striped" 0 1048576 4
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

# dm-multipath, request-based: one table with two paths, round-robin one
# request each. The two whole disks stand in for two paths to one LUN (the
# kernel does not check; multipathd would), so each clone's issue lands on
# one of them. 16 direct writes of 64 KiB; then `run -- dd` through it.
load_module dm_multipath
load_module dm_round_robin
mpath_size=$(( $(cat /sys/class/block/$stripe_a/size) / 8 * 8 ))
dmsetup create vmtest-mpath --table \
    "0 $mpath_size multipath 0 0 1 1 round-robin 0 2 1 /dev/$stripe_a 1 /dev/$stripe_b 1"
mpath=$(dmsetup info -c --noheadings -o blkdevname vmtest-mpath | tr -d " ")
wait_for_block "$mpath" 10
echo "mpath=$mpath" >> /results/names
echo "mpath_dev=$(cat /sys/class/block/$mpath/dev)" >> /results/names
dmsetup table vmtest-mpath > /results/mpath.table
blk_trace_start "$mpath" "$stripe_a" "$stripe_b"
start_report /results/report-mpath.json -d "$mpath" -d "$stripe_a" -d "$stripe_b"
guest-io write "/dev/$mpath" 0 65536 16
sleep 1
stop_report
blk_trace_stop /results/blk-mpath.trace "$mpath" "$stripe_a" "$stripe_b"
classic_pass mpath-classic "$mpath $stripe_a $stripe_b" guest-io write "/dev/$mpath" 0 65536 16
bounded 60 iosplit-trace run --json -o /results/run-mpath.json -- \
    dd if=/dev/zero of="/dev/$mpath" bs=64k count=8 oflag=direct 2> /results/run-mpath.json.stderr
dmsetup remove vmtest-mpath

# LVM, made by its own tools (no udev in the guest: lvm makes the nodes).
# A PV whose data area starts 3 sectors past 1 MiB (--dataalignmentoffset),
# then an LV over all of it: `check` and `run -- mkfs.ext4` must name the PV
# and give pvcreate's fix; the PV is then recreated as the fix says.
mkdir -p /run/lock/lvm /etc/lvm
lvm_cfg='devices { obtain_device_list_from_udev=0 } activation { udev_sync=0 udev_rules=0 monitoring=0 }'
lvm_make() {
    lvm pvcreate -ff -y --config "$lvm_cfg" "$@" "/dev/${stripe_a}1" &&
        lvm vgcreate -y --config "$lvm_cfg" vmtest-vg "/dev/${stripe_a}1" &&
        lvm lvcreate -y --config "$lvm_cfg" -n lv -l 100%FREE vmtest-vg
} >> /results/lvm.out 2>&1
lvm_remove() {
    lvm vgremove -ff -y --config "$lvm_cfg" vmtest-vg &&
        lvm pvremove -ff -y --config "$lvm_cfg" "/dev/${stripe_a}1"
} >> /results/lvm.out 2>&1
lvm_make --dataalignment 1m --dataalignmentoffset 3s
lvm pvs --config "$lvm_cfg" -o pv_name,pe_start --units s --noheadings >> /results/lvm.out 2>&1
lv=$(dmsetup info -c --noheadings -o blkdevname vmtest--vg-lv | tr -d " ")
wait_for_block "$lv" 10
echo "lvm_lv=$lv" >> /results/names
echo "lvm_pv=${stripe_a}1" >> /results/names
dmsetup table vmtest--vg-lv > /results/lvm.table
bounded 30 iosplit-trace check --json -o /results/check-lvm.json > /dev/null 2> /results/check-lvm.json.stderr
bounded 120 iosplit-trace run --json -o /results/run-lvm.json -- \
    mkfs.ext4 -F -E lazy_itable_init=0,lazy_journal_init=0 "/dev/$lv" \
    > /results/mkfs-lvm.out 2> /results/run-lvm.json.stderr
alignment=$(sed -n 's/.*pvcreate --dataalignment \([0-9]*k\).*/\1/p' /results/check-lvm.json | head -1)
echo "lvm_fix_alignment=$alignment" >> /results/names
lvm_remove
lvm_make --dataalignment "${alignment:-1024k}"
lvm pvs --config "$lvm_cfg" -o pv_name,pe_start --units s --noheadings >> /results/lvm.out 2>&1
lv=$(dmsetup info -c --noheadings -o blkdevname vmtest--vg-lv | tr -d " ")
wait_for_block "$lv" 10
echo "lvm_lv_fixed=$lv" >> /results/names
bounded 30 iosplit-trace check --json -o /results/check-lvm-fixed.json > /dev/null \
    2> /results/check-lvm-fixed.json.stderr
bounded 120 iosplit-trace run --json -o /results/run-lvm-fixed.json -- \
    mkfs.ext4 -F -E lazy_itable_init=0,lazy_journal_init=0 "/dev/$lv" \
    > /results/mkfs-lvm-fixed.out 2> /results/run-lvm-fixed.json.stderr
lvm_remove
