#!/usr/bin/env bash
# A real Prometheus server (Debian's package, installed by scripts/setup.sh)
# scrapes a tierfs mount's --metrics endpoint, and tierfs_ssd_hit_ratio is
# queried back through its HTTP API. Run by scripts/test.sh after the tests.
#
#   bash scripts/prometheus.sh [path/to/tierfs]
#
# Ports: TIERFS_METRICS_PORT (default 19877) and PROMETHEUS_PORT (19090).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/debug/tierfs}
[ -x "$bin" ] || { echo "prometheus.sh: no $bin; build it first (cargo build)" >&2; exit 1; }
command -v prometheus >/dev/null || { echo "prometheus.sh: no prometheus; run scripts/setup.sh" >&2; exit 1; }
mport=${TIERFS_METRICS_PORT:-19877}
pport=${PROMETHEUS_PORT:-19090}
work=$(mktemp -d /tmp/tierfs-prometheus.XXXXXX)
prom_pid=
cleanup() {
    if [ -n "$prom_pid" ]; then
        kill "$prom_pid" 2>/dev/null || true
        wait "$prom_pid" 2>/dev/null || true
    fi
    if mountpoint -q "$work/mnt"; then
        "$bin" umount "$work/mnt" || fusermount3 -u "$work/mnt" || true
    fi
    # Never walk into a mount that is still there.
    if mountpoint -q "$work/mnt"; then
        echo "prometheus.sh: $work/mnt is still mounted; left in place" >&2
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT
mkdir -p "$work"/{ssd,hdd,mnt,state,tsdb}
# The Grafana dashboard's queries parse: each becomes a recording rule
# that promtool checks.
{
    echo "groups:"
    echo "  - name: dashboard"
    echo "    rules:"
    n=0
    { grep -o '"expr": "\([^"\\]\|\\.\)*"' contrib/grafana-tierfs.json || true; } |
        sed -e 's/^"expr": "//' -e 's/"$//' -e 's/\\"/"/g' -e 's/\$instance/.*/g' -e "s/'/''/g" |
        while IFS= read -r e; do
            n=$((n + 1))
            echo "      - record: tierfs:dashboard_$n"
            echo "        expr: '$e'"
        done
} >"$work/dashboard-rules.yml"
grep -q 'expr:' "$work/dashboard-rules.yml" || { echo "prometheus.sh: no queries found in the dashboard" >&2; exit 1; }
promtool check rules "$work/dashboard-rules.yml"
"$bin" mount "$work/ssd" "$work/hdd" "$work/mnt" --state-dir "$work/state" --daemon \
    --io-mode userspace --metrics "127.0.0.1:$mport"
# Some requests for the hit ratio to count.
for i in $(seq 1 20); do head -c 65536 /dev/zero >"$work/mnt/f$i"; done
for i in $(seq 1 20); do cat "$work/mnt/f$i" >/dev/null; done
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: tierfs
    static_configs:
      - targets: ['127.0.0.1:$mport']
EOF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
    --web.listen-address="127.0.0.1:$pport" >"$work/prometheus.log" 2>&1 &
prom_pid=$!
query="http://127.0.0.1:$pport/api/v1/query?query=tierfs_ssd_hit_ratio"
for _ in $(seq 1 60); do
    # Our Prometheus, not another one on the port.
    if ! kill -0 "$prom_pid" 2>/dev/null; then
        echo "prometheus.sh: Prometheus exited (port $pport taken?)" >&2
        tail -20 "$work/prometheus.log" >&2
        exit 1
    fi
    answer=$(curl -fsS "$query" 2>/dev/null || true)
    if printf '%s' "$answer" | grep -q "\"instance\":\"127.0.0.1:$mport\""; then
        echo "prometheus.sh: Prometheus scraped the mount: $answer"
        exit 0
    fi
    sleep 0.5
done
echo "prometheus.sh: Prometheus did not return tierfs_ssd_hit_ratio within 30 s; last answer: ${answer:-none}" >&2
tail -20 "$work/prometheus.log" >&2
exit 1
