"""The recorded run the timeline tests read (test_timeline.py's run fixture): training steps, exact
allocations with markers, synthetic runtime events (the runtime does not emit them here), then
every format written to a folder. RECORD.format(out_dir=...) is the child's code."""

RECORD = r"""
import json, sys, torch
import torch.nn as nn
import tensorpager as tp
out_dir = sys.argv[1] if len(sys.argv) > 1 else {out_dir!r}
tp.install(device="cpu", budget="512MiB")
tp.start_timeline()
C = tp._ext.load()
stats_at = []

def mark(k):
    # A marker event (a zero-length stall with a recognisable id), then the
    # allocator's statistics at that point.
    C.timeline_record("stall", id=1000 + k, detail=0)
    s = tp.stats()
    stats_at.append([1000 + k, s["allocated_bytes.all.current"], s["reserved_bytes.all.current"]])

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
for _ in range(3):
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
mark(0)
held = []
for k, mib in enumerate([1, 3, 5, 7]):
    held.append(torch.empty(mib << 20, dtype=torch.uint8))
    mark(1 + k)
# The runtime's events around one tensor: offloaded, evicted, freed; then
# prefetched into a new block; a recomputation; an offload still running.
addr = held[1].untyped_storage().data_ptr()
C.timeline_record("offload_begin", id=1, bytes=3 << 20, address=addr)
C.timeline_record("offload_end", id=1, bytes=3 << 20, address=addr, host_bytes=3 << 20)
C.timeline_record("eviction", id=1, bytes=3 << 20, address=addr, detail=0)
del held[1]
mark(5)
back = torch.empty(3 << 20, dtype=torch.uint8)
paddr = back.untyped_storage().data_ptr()
C.timeline_record("prefetch_begin", id=1, bytes=3 << 20, address=paddr)
C.timeline_record("prefetch_end", id=1, bytes=3 << 20, address=paddr, host_bytes=0)
C.timeline_record("recompute_begin", id=2, bytes=1 << 20)
C.timeline_record("recompute_end", id=2, bytes=1 << 20)
C.timeline_record("offload_begin", id=3, bytes=1 << 20)
tp.mark_step()
del held[:2]
mark(6)
final = tp.stats()
for ext in ("json", "pickle", "html", "txt"):
    tp.dump_timeline(f"{{out_dir}}/run.{{ext}}", top=10)
tp.dump_snapshot(f"{{out_dir}}/snapshot.bin")
print(json.dumps({{"stats_at": stats_at, "final": final, "report": tp.report(top=10),
                  "info": C.timeline_info()}}))
"""
