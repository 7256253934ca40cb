#!/usr/bin/env bash
# Horovod (0.28.1, built with Gloo) elastic reset time on one machine, for
# comparison with accord's: a two-rank elastic PyTorch job (hvd.elastic.TorchState,
# a commit every batch, a short sleep per step) in which rank 1 SIGKILLs itself
# at commit KILL_AT on its first life only (a marker file), under
#
#   horovodrun -np 2 --min-np 1 --max-np 2 --host-discovery-script D \
#              --network-interface lo [--blacklist-cooldown-range 1 2] python train.py
#
#   benchmarks/horovod_elastic_reset.sh [VENV] [REPS]
#
# VENV (default /tmp/hvdgloo) holds horovod with Gloo (horovod.torch.gloo_built())
# and its horovodrun; REPS (default 5). Environment knobs:
#   HOSTS=alias   (default) discovery prints "localhost:1" and "127.0.0.1:1": two
#                 host names for this machine, one slot each. Horovod blacklists the
#                 *host* of a failed worker, so the survivor (on the other name)
#                 carries on with one rank.
#   HOSTS=single  discovery prints "localhost:2", as one would write it; the failure
#                 blacklists localhost, which holds every slot, so Horovod stops
#                 the whole job (the survivor gets SIGTERM). The script then reports
#                 the kill -> end-of-job time instead.
#   COOLDOWN="1 2" (default; "" for none) --blacklist-cooldown-range: after it the
#                 blacklisted name is usable again and Horovod scales back to two
#                 ranks (a fresh process in the killed slot). Without it the job
#                 runs on at one rank to STEPS.
#   STEPS (200), KILL_AT (5), SLEEP (0.05 s per step).
# Times (unix time.time(), same clock for every process):
#   reset_1rank  kill -> the survivor's first completed step (optimizer step with its
#                allreduce) after the reset, at one rank
#   detect       kill -> the survivor's HorovodInternalError (Gloo sees the peer gone)
#   callback     kill -> the survivor's reset callback (hvd re-initialized)
#   hosts_updated kill -> the survivor's HostsUpdatedInterrupt (the blacklisted name
#                is back: cooldown + discovery poll + the next commit)
#   back_2ranks  kill -> rank 0's first completed step at two ranks again
#   job_end      kill -> horovodrun's exit
# Each repetition prints one HVD_RESET line (JSON); the medians come last.
set -euo pipefail
venv="${1:-/tmp/hvdgloo}"
reps="${2:-5}"
hosts_mode="${HOSTS:-alias}"
cooldown="${COOLDOWN-1 2}"
export BENCH_STEPS="${STEPS:-200}" BENCH_KILL_AT="${KILL_AT:-5}" BENCH_SLEEP="${SLEEP:-0.05}"
py="$venv/bin/python"
"$py" -c 'import horovod.torch as hvd, sys; sys.exit(0 if hvd.gloo_built() else 1)' \
  || { echo "horovod in $venv is not built with Gloo" >&2; exit 1; }

work="$(mktemp -d /tmp/hvd_elastic_reset.XXXXXX)"
trap 'rm -rf "$work"' EXIT

if [[ $hosts_mode == single ]]; then
  printf '#!/bin/sh\necho localhost:2\n' > "$work/discover.sh"
else
  printf '#!/bin/sh\necho localhost:1\necho 127.0.0.1:1\n' > "$work/discover.sh"
fi
chmod +x "$work/discover.sh"

cat > "$work/train.py" <<'EOF'
import json, os, signal, time
import torch
import horovod.torch as hvd

LOG = os.environ["BENCH_LOG"]          # JSON lines, appended by every worker
MARKER = os.environ["BENCH_MARKER"]    # exists once rank 1 has killed itself
STEPS = int(os.environ["BENCH_STEPS"])
KILL_AT = int(os.environ["BENCH_KILL_AT"])
SLEEP = float(os.environ["BENCH_SLEEP"])
BACK_STEPS = 5                         # steps at two ranks again before stopping

def log(event, **kw):
    with open(LOG, "a") as f:
        f.write(json.dumps(dict(event=event, t=time.time(), pid=os.getpid(), **kw)) + "\n")

hvd.init()
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                               named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model, opt, batch=0, back=0)
pending = [None]

def on_reset():
    pending[0] = time.time()
    log("reset_callback", rank=hvd.rank(), size=hvd.size(), batch=state.batch)

state.register_reset_callbacks([on_reset])
log("start", rank=hvd.rank(), size=hvd.size())

@hvd.elastic.run
def train(state):
    first = True   # a fresh process that joins late logs its first step too
    try:
        loop(state, first)
    except Exception as e:              # HorovodInternalError / HostsUpdatedInterrupt
        log("interrupted", rank=hvd.rank(), size=hvd.size(), batch=state.batch, kind=type(e).__name__)
        raise

def loop(state, first):
    while state.batch < STEPS:
        opt.zero_grad()
        model(torch.randn(16, 32)).pow(2).mean().backward()
        opt.step()                      # waits for the allreduce over the current world
        if pending[0] is not None or (first and state.batch > 0):
            log("first_step_after_reset", rank=hvd.rank(), size=hvd.size(), batch=state.batch,
                fresh=pending[0] is None)
            pending[0] = None
        first = False
        time.sleep(SLEEP)
        state.batch += 1
        if hvd.size() == 2 and state.batch > KILL_AT:
            state.back += 1             # part of the state: every rank agrees
        if hvd.rank() == 1 and state.batch == KILL_AT and not os.path.exists(MARKER):
            open(MARKER, "w").close()
            log("kill", rank=1, batch=state.batch)
            os.kill(os.getpid(), signal.SIGKILL)
        state.commit()
        if state.back >= BACK_STEPS:
            break

train(state)
log("done", rank=hvd.rank(), size=hvd.size(), batch=state.batch)
EOF

cat > "$work/parse.py" <<'EOF'
import json, sys
log, rc, t_end, mode, rep = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], int(sys.argv[5])
ev = [json.loads(l) for l in open(log)]
kill = next(e["t"] for e in ev if e["event"] == "kill")
def first(pred):
    ts = [e["t"] for e in ev if pred(e) and e["t"] > kill]
    return round(min(ts) - kill, 4) if ts else None
out = dict(rep=rep, hosts=mode, horovodrun_rc=rc,
           detect=first(lambda e: e["event"] == "interrupted" and e["rank"] == 0 and e["size"] == 2),
           callback=first(lambda e: e["event"] == "reset_callback" and e["rank"] == 0 and e["size"] == 1),
           reset_1rank=first(lambda e: e["event"] == "first_step_after_reset" and e["rank"] == 0 and e["size"] == 1),
           hosts_updated=first(lambda e: e["event"] == "interrupted" and e["rank"] == 0 and e["size"] == 1),
           back_2ranks=first(lambda e: e["event"] == "first_step_after_reset" and e["rank"] == 0 and e["size"] == 2),
           job_end=round(t_end - kill, 4),
           final_size=max((e["size"] for e in ev if e["event"] == "done"), default=None))
print("HVD_RESET " + json.dumps(out), flush=True)
EOF

args=(-np 2 --min-np 1 --max-np 2 --host-discovery-script "$work/discover.sh"
      --network-interface lo)
[[ -n $cooldown ]] && args+=(--blacklist-cooldown-range $cooldown)
echo "command: $venv/bin/horovodrun ${args[*]} $py train.py" \
     "(STEPS=$BENCH_STEPS KILL_AT=$BENCH_KILL_AT SLEEP=$BENCH_SLEEP)"
cd "$work"
for ((i = 1; i <= reps; i++)); do
  export BENCH_LOG="$work/log.$i" BENCH_MARKER="$work/marker.$i"
  rc=0
  timeout 300 "$venv/bin/horovodrun" "${args[@]}" "$py" train.py > "$work/out.$i" 2>&1 || rc=$?
  t_end=$("$py" -c 'import time; print(time.time())')
  "$py" parse.py "$BENCH_LOG" "$rc" "$t_end" "$hosts_mode" "$i" | tee -a "$work/results"
done
"$py" - "$work/results" <<'EOF'
import json, statistics, sys
rows = [json.loads(l.split(" ", 1)[1]) for l in open(sys.argv[1])]
for key in ("detect", "callback", "reset_1rank", "hosts_updated", "back_2ranks", "job_end"):
    vals = [r[key] for r in rows if r[key] is not None]
    if vals:
        print(f"median {key}: {statistics.median(vals):.3f} s  (n={len(vals)}: "
              + ", ".join(f"{v:.3f}" for v in vals) + ")")
EOF
