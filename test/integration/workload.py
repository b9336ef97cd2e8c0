# workload.py — allocation-heavy, deterministic Python workload for the
# LD_PRELOAD comparison (run with PYTHONMALLOC=malloc so every object goes
# through malloc).  Prints digests of its results.
import hashlib
import json
import random
import threading
import zlib

rng = random.Random(20240601)
N = 100_000

words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 12)))
         for _ in range(N)]
d = {}
for i, w in enumerate(words):
    d.setdefault(w, []).append(i)
records = [{"id": i, "w": w, "n": len(d[w]), "f": i / 7.0, "tags": [w[:2], w[-2:]] * (i % 3)}
           for i, w in enumerate(words)]
text = json.dumps(records, sort_keys=True)
back = json.loads(text)
assert back == records

srt = sorted(records, key=lambda r: (r["w"], -r["id"]))
big = "|".join(r["w"] for r in srt)
parts = big.split("|")
comp = zlib.compress(big.encode() * 3, 6)
assert zlib.decompress(comp) == big.encode() * 3

# sets, bytes, growing and shrinking containers
s = set(words)
ba = bytearray()
for w in words[:20000]:
    ba += w.encode() * 3
del ba[::2]
lst = list(range(N))
for _ in range(5):
    lst = [x * 3 + 1 for x in lst if x % 7]

# threads allocating concurrently (each with its own generator)
results = [None] * 4
def work(k):
    r = random.Random(k)
    acc = {}
    for _ in range(30000):
        key = r.randrange(5000)
        acc[key] = acc.get(key, "") + str(key)[:3]
        if len(acc[key]) > 40:
            del acc[key]
    results[k] = hashlib.sha256(json.dumps(acc, sort_keys=True).encode()).hexdigest()
ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
for t in ts:
    t.start()
for t in ts:
    t.join()

h = hashlib.sha256()
h.update(text.encode())
h.update(big.encode())
h.update(str(len(s)).encode())
h.update(bytes(ba))
h.update(str(sum(lst)).encode())
h.update(comp)
print("words", len(words), "distinct", len(s), "parts", len(parts), "json", len(text))
print("threads", " ".join(r[:16] for r in results))
print("digest", h.hexdigest())
