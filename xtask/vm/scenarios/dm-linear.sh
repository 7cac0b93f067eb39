# dm-linear over a partition: each bio to dm-0 is remapped twice (dm-0 -> vda1
# -> vda). The report's event counts must match the blk tracer on both queues,
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
