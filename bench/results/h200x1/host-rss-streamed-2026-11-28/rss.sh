# Samples a trainer's /proc status every 0.2 s; prints the peak of each field.
run_rss() {
  name=$1; shift
  "$@" > $OUT/$name.out 2>&1 &
  pid=$!
  : > $OUT/$name.rss
  while kill -0 $pid 2>/dev/null; do
    for p in $pid $(pgrep -P $pid); do
      grep -E "VmHWM|VmRSS|RssAnon|RssFile|RssShmem|VmPin|VmLck" /proc/$p/status 2>/dev/null | tr -s ' ' | tr '\n' ' ' >> $OUT/$name.rss
      echo >> $OUT/$name.rss
    done
    sleep 0.2
  done
  wait $pid; echo "$name rc=$?"
  python3 - $OUT/$name.rss <<'PY'
import sys, re
peak = {}
for line in open(sys.argv[1]):
    for k, v in re.findall(r"(\w+): (\d+) kB", line):
        peak[k] = max(peak.get(k, 0), int(v))
print(" ".join(f"{k}={v/1048576:.2f}GiB" for k, v in peak.items()))
PY
}
