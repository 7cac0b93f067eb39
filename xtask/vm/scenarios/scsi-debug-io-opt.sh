# scsi_debug with 4 KiB physical blocks and a 128 KiB optimal transfer size.
# Partition 1 starts at 2056 (4 KiB-aligned, not 128 KiB); partition 2 at
# 264192 (128 KiB-aligned) is the control.
load_module crct10dif_generic
load_module crc64_rocksoft_generic
load_module scsi_debug dev_size_mb=256 sector_size=512 physblk_exp=3 opt_blks=256
load_module sd_mod
wait_for_block sda 20
printf 'label: dos\nstart=2056, size=131072, type=83\nstart=264192, size=131072, type=83\n' \
    | sfdisk -q /dev/sda
wait_for_block sda1 10
wait_for_block sda2 10
echo "p1=sda1" > /results/names
echo "p2=sda2" >> /results/names
geometry sda sda1 > /results/sda1.geometry
geometry sda sda2 > /results/sda2.geometry
bounded 60 iosplit-trace check sda --json > /results/check.json 2> /results/check.json.stderr
echo $? > /results/check.rc
