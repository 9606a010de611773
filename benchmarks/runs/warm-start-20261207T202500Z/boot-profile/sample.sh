#!/bin/bash
# sample.sh NAME EXTRA_APPEND : boots with a monitor, samples vCPU0 RIP
APP="console=ttyS0 quiet panic=-1 oops=panic cryptomgr.notests rdinit=/init irqaffinity=0 thash_entries=131072 initcall_blacklist=jent_mod_init,load_system_certificate_list,bpf_tcp_ca_kfunc_init,bpf_dummy_struct_ops_init rcu_nocbs=1 nokaslr $2"
rm -f /tmp/bootx/$1.sock
s=$(date +%s.%N)
qemu-system-x86_64 -M pc -cpu ${CPU:-max} -nodefaults -display none -no-reboot -accel tcg -icount shift=0,sleep=off -smp 2 -rtc base=2024-01-01T00:00:00,clock=vm -m 512 -seed 1 -kernel /var/cache/ratchet/emulator/vmlinuz -initrd /tmp/bootx/init.cpio -append "$APP" -serial file:/tmp/bootx/$1.console -serial file:/dev/null -monitor unix:/tmp/bootx/$1.sock,server,nowait -plugin /root/.cache/ratchet/meter-plugin/meter-b6873382d3264711.so,out=/tmp/bootx/$1.marks,sut=1 >/dev/null 2>&1 &
python3 /tmp/bootx/sampler.py /tmp/bootx/$1.sock > /tmp/bootx/$1.rips 2>/dev/null
wait
e=$(date +%s.%N)
echo "$1 host_s=$(echo "$e - $s" | bc) $(tail -1 /tmp/bootx/$1.marks)"
python3 /tmp/bootx/sym.py /tmp/bootx/$1.rips | head -${TOP:-8}
