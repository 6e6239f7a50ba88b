#!/bin/sh
# The kernel's packet generator (pktgen), one thread per generator core, each on its own TX
# queue: 64-byte UDP to the VIP, random source ports and addresses (many flows).
# Usage: pktgen-udp.sh IFACE DST_MAC [SECONDS] [THREADS]
# Needs the pktgen module (modprobe pktgen) on the generator machine, which is not this lab's
# kernel. Documentation addresses only: edit VIP and SRC for your test network.
set -eu
IFACE=$1 DST_MAC=$2 SECONDS=${3:-10} THREADS=${4:-2}
VIP=203.0.113.10 PORT=9000 SRC_MIN=192.0.2.10 SRC_MAX=192.0.2.250
PG=/proc/net/pktgen
pg() { echo "$2" > "$PG/$1"; }
pg pgctrl reset
t=0
while [ "$t" -lt "$THREADS" ]; do
    dev="$IFACE@$t"
    pg "kpktgend_$t" "rem_device_all"
    pg "kpktgend_$t" "add_device $dev"
    pg "$dev" "count 0"
    pg "$dev" "pkt_size 106"          # 64 B payload + UDP/IPv4/Ethernet headers (FCS excluded)
    pg "$dev" "queue_map_min $t"
    pg "$dev" "queue_map_max $t"
    pg "$dev" "dst $VIP"
    pg "$dev" "dst_mac $DST_MAC"
    pg "$dev" "src_min $SRC_MIN"
    pg "$dev" "src_max $SRC_MAX"
    pg "$dev" "udp_dst_min $PORT"
    pg "$dev" "udp_dst_max $PORT"
    pg "$dev" "udp_src_min 1024"
    pg "$dev" "udp_src_max 65535"
    pg "$dev" "flag UDPSRC_RND"
    pg "$dev" "flag IPSRC_RND"
    pg "$dev" "burst 32"
    t=$((t + 1))
done
pg pgctrl start &
sleep "$SECONDS"
pg pgctrl stop
t=0
while [ "$t" -lt "$THREADS" ]; do grep -h "pps\|Result" "$PG/$IFACE@$t"; t=$((t + 1)); done
