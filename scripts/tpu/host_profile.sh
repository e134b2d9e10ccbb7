# On the TPU machine, after `. scripts/tpu/setup.sh`: where a W2 step's host time goes.
# Writes the host timelines (Chrome/Perfetto traces) of 10 steps to $OUT when set.
set -u
out=${OUT:-/tmp}
B="python3 -m lazyxla.bench --no-progress --phases --workloads gpt --steps 20 --out $out/phases"
$B-proxy --gpt-size proxy --systems lazyxla
$B-reference --systems lazyxla,lazyxla_compiled
python3 scripts/step_floor.py --size reference --steps 20
python3 - "$out" <<'PY'
import sys, torch, lazyxla as lx
from lazyxla import workloads as W
from torch.nn import functional as F
torch.manual_seed(0)
model = W.gpt(W.GPTConfig()).to(lx.device())
tok = torch.randint(0, 4096, (8, 129), generator=torch.Generator().manual_seed(1))
x, y = tok[:, :-1].contiguous().to(lx.device()), tok[:, 1:].contiguous().to(lx.device())
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
def step():
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(model(x).reshape(-1, 4096), y.reshape(-1)).backward()
    opt.step()
for _ in range(6):
    step()
with lx.debug.host_timeline(f"{sys.argv[1]}/w2_lazy_timeline.json") as recording:
    for _ in range(10):
        step()
    lx.wait_device_ops()
print(recording)
PY
