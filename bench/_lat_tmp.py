import sys, tempfile, os, signal, json
from pathlib import Path
sys.path.insert(0, "bench"); sys.path.insert(0, ".")
from _common import TwistdBroker, run_driver
# usage: lat.py flush wl1,wl2 n settingsjson...
flush = sys.argv[1]; wls = sys.argv[2].split(","); n = int(sys.argv[3]); variants = [json.loads(a) for a in sys.argv[4:]]
rounds = int(os.environ.get("ROUNDS", "3"))
res = {}
for r in range(rounds):
    for vi, v in enumerate(variants):
        tmp = Path(tempfile.mkdtemp()); data = tmp / "data"; data.mkdir()
        b = TwistdBroker(data, {"flush": flush, **v})
        try:
            for wl in wls:
                drv = "kafka_driver.py" if wl.startswith("K") and wl not in ("K5","K1-C") else ("c_driver.py" if wl in ("K5","K1-C") else "rustka_driver.py")
                spec = b.spec("K1" if wl == "K1-C" else wl, f"t-{wl}-{r}", n)
                if wl == "K5": spec = b.spec(wl, f"t-{wl}-{r}", n * 30, partitions=64)
                out = run_driver(drv, spec)
                key = (json.dumps(v), wl)
                cpu = out.get("server_cpu_s") or out.get("srv_cpu") 
                res.setdefault(key, []).append((out.get("p50_us"), out.get("p99_us"), out["records"]/out["seconds"], out.get("server_cpu")))
        finally:
            b.proc.send_signal(signal.SIGTERM); b.proc.wait()
import statistics
for (v, wl), rows in sorted(res.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    p50 = [x[0] for x in rows if x[0]]; rate = [x[2] for x in rows]
    print(f"{wl:5} {v:40} p50 {statistics.median(p50) if p50 else 0:8.1f}  rate {statistics.median(rate):10.0f}  rounds p50 {[round(x or 0) for x in p50]} rates {[round(x) for x in rate]}")
