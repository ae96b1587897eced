"""fsdpp-data reads every data format a user brings as `datasets` itself reads it.

usage: data_records.py FSDPP_DATA

Each format is written here by the library users write it with (json, gzip, zstandard, pyarrow,
datasets), then `fsdpp-data records PATH` prints the records, and they must equal, in order, what
datasets' loaders give (load_dataset("json" / "parquet"), load_from_disk): JSON Lines, a .json
array, .jsonl.gz, .jsonl.zst, Parquet with several row groups, Dataset.to_parquet, save_to_disk
with 2 shards, a glob of Parquet shards, nested messages columns, and a line longer than the
reader's 1 MiB buffer. `--examples` must give TRL's examples with the empty text skipped and
counted. datasets fills a field a JSON record lacks with None (and a struct's missing keys); such
None values are dropped on both sides before comparing.
"""
import gzip
import json
import os
import subprocess
import sys
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")

FSDPP_DATA = sys.argv[1]
failures = []


def drop_none(value):
    if isinstance(value, dict):
        return {k: drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_none(v) for v in value]
    return value


def fsdpp_records(path, *flags):
    r = subprocess.run([FSDPP_DATA, "records", path, *flags], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"fsdpp-data records {path} {' '.join(flags)} failed:\n{r.stderr}")
    return [json.loads(line) for line in r.stdout.splitlines()], r.stderr


def check(name, path, expected, *flags):
    got, summary = fsdpp_records(path, *flags)
    want = [drop_none(dict(r)) for r in expected]
    got = [drop_none(r) for r in got]
    if got != want:
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        failures.append(f"{name}: {len(got)} records, datasets {len(want)}; first difference at {first}:\n"
                        f"  fsdpp:    {got[first] if first < len(got) else None}\n"
                        f"  datasets: {want[first] if first < len(want) else None}")
    else:
        print(f"ok   {name}: {len(got)} records equal datasets' ({summary.strip()})")
    return summary


def plain_records(n):
    texts = ["plain ascii", "é ü ñ — “quotes”", "漢字かなカナ 한국어", "emoji 👩‍💻🇫🇷 and combining e\u0301",
             "tabs\tand\nnewlines\r\n", "", "  spaces  ", "nbsp\u00a0zero\u200bwidth", "back\\slash \"quoted\""]
    out = []
    for i in range(n):
        rec = {"text": texts[i % len(texts)] + f" #{i}" if i % 9 != 5 else "", "id": i, "score": i / 8,
               "ok": i % 3 == 0, "tags": [f"t{j}" for j in range(i % 4)],
               "meta": {"source": f"s{i % 5}", "len": i * 10}}
        if i % 7 == 3:
            rec["note"] = None
        out.append(rec)
    return out


def chat_records(n):
    out = []
    for i in range(n):
        msgs = [{"role": "system", "content": "Be brief."}] if i % 2 else []
        msgs += [{"role": "user", "content": f"question {i} ¿qué?"}, {"role": "assistant", "content": f"answer {i} 答"}]
        out.append({"messages": msgs, "id": i})
    return out


def write_jsonl(path, records, opener=open):
    with opener(path, "wt", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main():
    import datasets
    from datasets import Dataset, load_dataset, load_from_disk

    with tempfile.TemporaryDirectory() as d:
        os.environ["HF_DATASETS_CACHE"] = os.path.join(d, "hf-cache")
        plain, chat = plain_records(60), chat_records(25)
        ds_json = lambda p: list(load_dataset("json", data_files=p, split="train", cache_dir=os.path.join(d, "c")))
        ds_parquet = lambda p: list(load_dataset("parquet", data_files=p, split="train", cache_dir=os.path.join(d, "c")))

        p = os.path.join(d, "plain.jsonl")
        write_jsonl(p, plain)
        check("JSON Lines", p, ds_json(p))

        p = os.path.join(d, "array.json")
        with open(p, "w", encoding="utf-8") as f:
            json.dump(plain, f, ensure_ascii=False, indent=2)
        check(".json array", p, ds_json(p))

        p = os.path.join(d, "plain.jsonl.gz")
        write_jsonl(p, plain, gzip.open)
        check(".jsonl.gz", p, ds_json(p))

        p = os.path.join(d, "plain.jsonl.zst")
        with open(p, "wb") as raw, zstandard.ZstdCompressor().stream_writer(raw) as z:
            for r in plain:
                z.write((json.dumps(r, ensure_ascii=False) + "\n").encode())
        check(".jsonl.zst", p, ds_json(p))

        p = os.path.join(d, "chat.jsonl")
        write_jsonl(p, chat)
        check("messages, JSON Lines", p, ds_json(p))

        # Lines longer than the reader's 1 MiB buffer, beside short ones.
        p = os.path.join(d, "long.jsonl")
        write_jsonl(p, [{"text": "short"}, {"text": "x" * 1_500_000 + "é"}, {"text": "y" * 3_000_000}, {"text": "end"}])
        check("lines over 1 MiB", p, ds_json(p))

        p = os.path.join(d, "groups.parquet")
        pq.write_table(pa.Table.from_pylist(plain), p, row_group_size=7)
        assert pq.ParquetFile(p).num_row_groups == 9
        check("Parquet, 9 row groups", p, ds_parquet(p))

        p = os.path.join(d, "chat.parquet")
        Dataset.from_list(chat).to_parquet(p)
        assert pa.types.is_struct(pq.read_schema(p).field("messages").type.value_type)  # list<struct<role, content>>
        check("messages, Dataset.to_parquet", p, ds_parquet(p))

        p = os.path.join(d, "types.parquet")
        pq.write_table(pa.table({
            "text": pa.array(["a", "b", None], pa.large_string()),
            "cat": pa.array(["x", "y", "x"]).dictionary_encode(),
            "f32": pa.array([0.1, -2.5, None], pa.float32()),
            "u64": pa.array([0, 2**63 + 5, 7], pa.uint64()),
            "nested": pa.array([[{"a": [1, 2]}], [], None], pa.list_(pa.struct([("a", pa.list_(pa.int16()))])))}), p)
        check("large_string, dictionary, float32, uint64, nested lists", p, ds_parquet(p))

        p = os.path.join(d, "saved")
        Dataset.from_list(plain).save_to_disk(p, num_shards=2)
        assert sorted(f for f in os.listdir(p) if f.endswith(".arrow")) == ["data-00000-of-00002.arrow",
                                                                           "data-00001-of-00002.arrow"]
        check("save_to_disk, 2 shards", p, list(load_from_disk(p)))

        p = os.path.join(d, "shards")
        os.makedirs(p)
        for k in range(3):
            pq.write_table(pa.Table.from_pylist(plain[k * 20:(k + 1) * 20]),
                           os.path.join(p, f"train-{k:05d}-of-00003.parquet"), row_group_size=6)
        pq.write_table(pa.Table.from_pylist(plain[:2]), os.path.join(p, "test-00000-of-00001.parquet"))
        glob = os.path.join(p, "train-*.parquet")
        check("a glob of Parquet shards", glob, ds_parquet(glob))

        # Examples: TRL's {"text"} with the empty texts skipped and counted; messages as they are.
        want = [{"text": r["text"]} for r in plain if r["text"]]
        summary = check("examples from text", os.path.join(d, "plain.jsonl"), want, "--examples")
        skipped = sum(1 for r in plain if not r["text"])
        if f"{skipped} skipped" not in summary:
            failures.append(f"examples: the summary does not count {skipped} skipped: {summary}")
        check("examples from messages (Parquet)", os.path.join(d, "chat.parquet"),
              [{"messages": r["messages"]} for r in chat], "--examples")
        print(f"datasets {datasets.__version__}, pyarrow {pa.__version__}")

    if failures:
        print("\n".join("FAIL " + f for f in failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
