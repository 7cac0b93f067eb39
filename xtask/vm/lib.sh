# Helpers for the scenario scripts (busybox sh). Sourced by /init.

# load_module NAME [PARAM=VALUE...]: insmod NAME after its dependencies
# (the order xtask computed from modules.dep is in /etc/modules/NAME).
load_module() {
    name=$1
    shift
    list=/etc/modules/$name
    [ -f "$list" ] || { echo "load_module: no list for $name"; return 1; }
    last=$(tail -n 1 "$list")
    for path in $(cat "$list"); do
        module=$(basename "$path" .ko | tr - _)
        [ -d "/sys/module/$module" ] && continue
        if [ "$path" = "$last" ]; then
            insmod "$path" "$@" || return 1
        else
            insmod "$path" || return 1
        fi
    done
}

# serial_of DISK: the serial number a virtio or NVMe disk reports.
serial_of() {
    cat "/sys/block/$1/serial" 2>/dev/null || cat "/sys/block/$1/device/serial" 2>/dev/null
}

# wait_for_serial SERIAL SECONDS: print the disk name with that serial.
wait_for_serial() {
    tries=$(( $2 * 10 ))
    while [ "$tries" -gt 0 ]; do
        for dir in /sys/block/*; do
            disk=${dir##*/}
            if [ "$(serial_of "$disk" | tr -d ' ')" = "$1" ]; then
                echo "$disk"
                return 0
            fi
        done
        usleep 100000
        tries=$(( tries - 1 ))
    done
    return 1
}

# wait_for_block NAME SECONDS: wait until /sys/class/block/NAME exists.
wait_for_block() {
    tries=$(( $2 * 10 ))
    while [ ! -e "/sys/class/block/$1" ] && [ "$tries" -gt 0 ]; do
        usleep 100000
        tries=$(( tries - 1 ))
    done
    [ -e "/sys/class/block/$1" ] && [ -e "/dev/$1" ]
}

# geometry DISK [PART] > FILE: the queue limits and partition numbers, key=value.
geometry() {
    q=/sys/block/$1/queue
    for key in logical_block_size physical_block_size minimum_io_size optimal_io_size \
               max_sectors_kb max_hw_sectors_kb max_segments max_segment_size \
               virt_boundary_mask nomerges scheduler chunk_sectors nr_requests; do
        [ -r "$q/$key" ] && echo "disk.$key=$(cat "$q/$key")"
    done
    echo "disk.alignment_offset=$(cat /sys/block/$1/alignment_offset)"
    echo "disk.size=$(cat /sys/block/$1/size)"
    if [ -n "$2" ]; then
        p=/sys/class/block/$2
        for key in start size alignment_offset; do
            echo "part.$key=$(cat "$p/$key")"
        done
        echo "part.block_size=$(blockdev --getbsz "/dev/$2")"
    fi
}

# bounded SECS CMD...: run CMD, send it SIGINT after SECS and SIGKILL 10 s
# later, so one hung step cannot eat the whole VM's time budget.
bounded() {
    secs=$1
    shift
    "$@" &
    pid=$!
    # The watchdog writes to the console, not to our stdout: a leftover sleep
    # holding the log pipe open would stall /init's tee until it ends.
    ( sleep "$secs"; kill -INT "$pid" 2>/dev/null && echo "bounded: SIGINT to $1 after ${secs}s" \
        && sleep 10 && kill -KILL "$pid" 2>/dev/null ) > /dev/console 2>&1 &
    watchdog=$!
    wait "$pid"
    rc=$?
    kill "$watchdog" 2>/dev/null
    return "$rc"
}

# tracer_attached PID: the number of perf-event and BPF-link descriptors PID holds.
tracer_attached() {
    ls -l "/proc/$1/fd" 2>/dev/null | grep -c -e 'perf_event' -e 'bpf_link' -e 'bpf-link'
}

# start_report OUT [ARGS...]: iosplit-trace report --json in the background,
# returning once its probes stopped attaching. Sets REPORT_PID.
start_report() {
    out=$1
    shift
    iosplit-trace report --json --duration 900 "$@" > "$out" 2> "$out.stderr" &
    REPORT_PID=$!
    REPORT_OUT=$out
    previous=-1
    tries=600
    while [ "$tries" -gt 0 ]; do
        kill -0 "$REPORT_PID" 2>/dev/null || { echo "start_report: iosplit-trace exited"; return 1; }
        count=$(tracer_attached "$REPORT_PID")
        [ "$count" -gt 0 ] && [ "$count" = "$previous" ] && break
        previous=$count
        sleep 1
        tries=$(( tries - 1 ))
    done
    echo "start_report: $count probe descriptors attached"
    sleep 1
}

# stop_report: SIGINT the report started last, wait (SIGKILL after 60 s),
# record its exit status.
stop_report() {
    # The probes' fdinfo: recursion_misses counts runs the kernel skipped
    # because another BPF program was active on the CPU (e.g. an IRQ completion
    # during a queue probe); those events never reach the ring buffer.
    for info in /proc/"$REPORT_PID"/fdinfo/*; do
        grep -q '^prog_type' "$info" 2>/dev/null && cat "$info"
    done > "$REPORT_OUT.fdinfo" 2>/dev/null
    kill -INT "$REPORT_PID" 2>/dev/null
    ( sleep 60; kill -KILL "$REPORT_PID" 2>/dev/null && echo "stop_report: had to SIGKILL" ) \
        > /dev/console 2>&1 &
    watchdog=$!
    wait "$REPORT_PID"
    rc=$?
    kill "$watchdog" 2>/dev/null
    echo "$rc" > "$REPORT_OUT.rc"
    return "$rc"
}

# The kernel's ftrace blk tracer on DISK, as an oracle.
mount_tracefs() {
    [ -d /sys/kernel/tracing/events ] || mount -t tracefs tracefs /sys/kernel/tracing
}

blk_trace_start() {
    mount_tracefs
    t=/sys/kernel/tracing
    echo 0 > $t/tracing_on
    echo nop > $t/current_tracer
    echo 65536 > $t/buffer_size_kb
    echo > $t/trace
    for traced in "$@"; do echo 1 > "/sys/block/$traced/trace/enable"; done
    echo blk > $t/current_tracer
    echo 1 > $t/tracing_on
}

# blk_trace_stop OUT DISK...: save the trace and overrun counters, switch it off.
blk_trace_stop() {
    out=$1
    shift
    t=/sys/kernel/tracing
    echo 0 > $t/tracing_on
    cat $t/trace > "$out"
    cat $t/per_cpu/cpu*/stats > "$out.stats"
    echo nop > $t/current_tracer
    for traced in "$@"; do echo 0 > "/sys/block/$traced/trace/enable"; done
    echo > $t/trace
}
