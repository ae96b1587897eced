"""fsdpp-plan's one answer (docs/planner.md#the-answer), end to end:

    plan_answer.py FSDPP_PLAN FSDPP_ESTIMATE FSDPP_RUN FSDPP_TRAIN SRC

1. Every fitting row of `fsdpp-plan configs/default.yaml --cluster cpu` carries the overrides
   that reproduce it: fsdpp-estimate given the config and those overrides estimates the row's
   memory to the byte.
2. fsdpp-estimate --budget gives fsdpp-plan's answer and the same fsdpp-run line: for the
   default model on the cpu preset, and for the issue's case, Llama 3 8B on 8 H100s (16 x 8192
   tokens, bf16), where the two tools used to disagree.
3. The answer's fsdpp-run line, as printed, trains (2 ranks, 2 steps).
"""
import json
import os
import shlex
import subprocess
import sys
import tempfile

plan, estimate, run, train, src = sys.argv[1:6]
os.chdir(src)
work = tempfile.mkdtemp()
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def sh(args):
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        raise SystemExit(f"FAIL: {' '.join(args)} exited {p.returncode}")
    return p.stdout


def planned(args):
    out = os.path.join(work, "plan.json")
    text = sh([plan, *args, "--json", out])
    with open(out) as f:
        return json.load(f), text


# 1. Each row's overrides reproduce its memory.
cfg = "configs/default.yaml"
p, text = planned([cfg, "--cluster", "cpu", "--world-size", "4", "--global-batch", "8", "--schedules", "1F1B,ZBH1"])
check(len(p["fitting"]) >= 8, f"only {len(p['fitting'])} layouts fit")
for row in p["fitting"]:
    e = json.loads(sh([estimate, cfg, *row["overrides"], "-n", "4", "--json"]))["estimates"][0]
    check(e["total_bytes"] == row["memory_bytes"],
          f"{row['layout']}: fsdpp-estimate {cfg} {' '.join(row['overrides'])} gives {e['total_bytes']} bytes, "
          f"the row {row['memory_bytes']}")
    check(0 < row["error_band"] < 1, f"{row['layout']}: error band {row['error_band']}")
print(f"1. {len(p['fitting'])} rows reproduced by their overrides")
check("answer: " + p["answer"]["layout"] in text, "the text does not state the JSON's answer")
check(p["answer"]["command"] in text, "the text does not print the answer's fsdpp-run line")

# 2. fsdpp-estimate --budget answers as fsdpp-plan does.
est = json.loads(sh([estimate, cfg, "-n", "4", "--budget", "5", "--global-batch", "8", "--json"]))
rec = est["recommendations"][0]
p4, _ = planned([cfg, "--cluster", "cpu", "--world-size", "4", "--global-batch", "8"])
check(rec["chosen"] == p4["answer"]["layout"], f"estimate chose {rec['chosen']}, plan {p4['answer']['layout']}")
check(rec["command"] == p4["answer"]["command"], f"estimate's line {rec['command']!r}, plan's {p4['answer']['command']!r}")
llama8b = ["--vocab-size", "128256", "--dim", "4096", "--n-layers", "32", "--n-heads", "32", "--n-kv-heads", "8",
           "--ffn-hidden", "14336", "--seq-len", "8192", "--max-seq-len", "8192"]
est = json.loads(sh([estimate, *llama8b, "-b", "2", "-n", "8", "--param-dtype", "bf16", "--reduce-dtype", "fp32",
                     "--device", "cuda", "--runtime-baseline-mb", "0", "--budget", str(79.6), "--global-batch", "16",
                     "--json"]))
p8, _ = planned(["examples/plan/llama-3-8b/config.json", "--cluster", "h100-sxm", "--world-size", "8",
                 "--global-batch", "16", "--seq-len", "8192", "--mixed-precision", "bf16"])
rec = est["recommendations"][0]
check(rec["chosen"] == p8["answer"]["layout"],
      f"Llama 3 8B: fsdpp-estimate --budget chose {rec['chosen']}, fsdpp-plan {p8['answer']['layout']}")
print(f"2. both tools answer {p4['answer']['layout']} (default, cpu) and {p8['answer']['layout']} (Llama 3 8B, 8 H100)")

# 3. The answer's line, as printed, trains.
p2, _ = planned([cfg, "--cluster", "cpu", "--world-size", "2", "--global-batch", "4"])
words = shlex.split(p2["answer"]["command"])
check(words[0] == "fsdpp-run" and "fsdpp-train" in words, f"not an fsdpp-run line: {words}")
words[0] = run
words[words.index("fsdpp-train")] = train
out = os.path.join(work, "run")
words += ["training.max_steps=2", "training.eval_steps=0", "training.save_strategy=no", "training.sample_tokens=0",
          f"training.output_dir={out}", f"data.cache_dir={work}/cache", "training.report_to=none"]
r = subprocess.run(words, capture_output=True, text=True, timeout=300)
check(r.returncode == 0, f"{' '.join(words)} exited {r.returncode}: {r.stdout[-2000:]} {r.stderr[-2000:]}")
if r.returncode == 0:
    with open(os.path.join(out, "metrics.jsonl")) as f:
        steps = [json.loads(line)["step"] for line in f if '"loss"' in line]
    check(steps and steps[-1] == 2, f"the run logged steps {steps}")
print(f"3. {p2['answer']['layout']}: {p2['answer']['command']} trained")

if failures:
    raise SystemExit(f"{len(failures)} failures")
print("plan_answer: ok")
