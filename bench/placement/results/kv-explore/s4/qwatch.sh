#!/bin/bash
# host side, read-only: per-thread CPU ticks of the running QEMU guest, every second
while true; do
  q=$(pgrep -f "qemu-system-x86_64 -name nodeagent-realkernel" | head -1)
  if [ -n "$q" ]; then
    st=$(awk '{print $22}' /proc/$q/stat 2>/dev/null)
    line="$(date +%s.%N | cut -c1-14) q=$q start=$st"
    for t in /proc/$q/task/*; do
      line="$line ${t##*/}:$(tr ' ' _ < $t/comm 2>/dev/null)=$(awk '{print $14+$15}' $t/stat 2>/dev/null)"
    done
    echo "$line"
  fi
  sleep 1
done
