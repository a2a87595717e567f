"""An RL loop driven over HTTP alone, the way slime drives SGLang (shared/docs/field-notes.md
§3.5), against `hart serve --http-bind`. Each iteration:

  1. rollouts: PROMPTS prompts x GROUP samples through /generate with log-probs, on threads;
     every sample must carry the serving weight version;
  2. a toy training step: a toy reward (the share of even token ids), GRPO's group-normalized
     advantages and the policy-gradient loss a trainer would differentiate, from the server's
     log-probs; then a new checkpoint directory: the served weights with --tensor moved by a
     seeded random step (the stand-in for an optimizer step; examples/rl has a real GRPO
     trainer), written in BF16 as a trainer writes it;
  3. slime's update sequence: pause (abort mode) -> flush_cache -> update_weights_from_disk ->
     continue, after which the server must report the new version and a fixed greedy probe must
     answer with other log-probs (the new weights, not only a new label).

A long "straggler" sample runs across iterations as a partial rollout does in slime: each pause
aborts it, keeping its tokens so far, and the next iteration resumes it with prompt + those
tokens as input_ids; each segment must carry the version that was serving while it ran. A final
rollout checks that the last update's version is stamped too. Exits non-zero on a failed check.

The checkpoints go to --out, which the server must be able to read (the same machine).

  python3 python/examples/rl_loop.py http://127.0.0.1:30000 --iterations 3 --out /tmp/rl-ckpt
"""
import argparse
import json
import random
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # hart_client without installing it

import safetensors_io  # noqa: E402  (beside this file)
from hart_client import HartClient  # noqa: E402

PROBE = {"input_ids": [3, 4, 5, 6], "sampling_params": {"max_new_tokens": 8, "temperature": 0}, "return_logprob": True}


def check(cond, what):
    if not cond:
        raise SystemExit(f"rl_loop: check failed: {what}")


# -- rollouts ----------------------------------------------------------------------------

def rollout(client, prompts, args, iteration, version):
    """GROUP samples of each prompt (one /generate with n = GROUP each, prompts on threads);
    returns [[GenerateResult] per prompt]."""
    def one(i):
        params = {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "n": args.group,
                  # Seeded so a run replays; no_stop_trim keeps the stop token (slime's setting).
                  "sampling_seed": iteration * 10_000 + i * args.group, "no_stop_trim": True}
        out = client.generate(input_ids=prompts[i], sampling_params=params, return_logprob=True,
                              rid=f"it{iteration}-p{i}")
        return out if isinstance(out, list) else [out]  # n = 1 answers one object

    with ThreadPoolExecutor(args.threads) as pool:
        groups = list(pool.map(one, range(len(prompts))))
    for g, samples in enumerate(groups):
        for s in samples:
            check(s.weight_version == version, f"prompt {g} sample {s.index}: weight_version {s.weight_version}, "
                                               f"expected {version}")
            check(s.finish_reason in ("stop", "length"), f"prompt {g} sample {s.index} ended with {s.finish_reason}")
            check(len(s.output_token_logprobs) == len(s.output_ids) > 0, f"prompt {g} sample {s.index}: log-probs")
    return groups


class Straggler:
    """A sample longer than one iteration, continued across updates: each segment is one
    streamed /generate of prompt + every token so far; a pause in abort mode ends it with its
    partial tokens, each segment stamped with the version that made it."""

    def __init__(self, client, prompt, budget):
        self.client, self.prompt, self.budget = client, prompt, budget
        self.tokens, self.segments = [], []  # segments: (weight_version, n_tokens, finish_reason)
        self.finished = False

    def resume(self, iteration):
        self.rid, self.last, self.error = f"straggler-{iteration}", None, None
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)  # a failed check exits at once
        self.thread.start()
        # The first token, so that the coming pause finds the segment running.
        check(self.started.wait(60), f"{self.rid}: no token in 60 s")

    def _run(self):
        # Without log-probs: stream chunks are cumulative, and a long stream's would add up.
        params = {"max_new_tokens": self.budget - len(self.tokens), "ignore_eos": True, "temperature": 1.0}
        try:
            for chunk in self.client.generate_stream(input_ids=self.prompt + self.tokens, sampling_params=params,
                                                     rid=self.rid):
                self.last = chunk
                self.started.set()
        except Exception as e:  # reported by join(), on the loop's thread
            self.error = e
        self.started.set()  # also after a failure, so that resume() does not wait for a token

    def join(self):
        """The segment's end: (finish_reason, weight_version)."""
        self.thread.join()
        check(self.error is None and self.last is not None, f"{self.rid}: {self.error or 'no chunk'}")
        r = self.last
        self.tokens += r.output_ids
        self.segments.append((r.weight_version, len(r.output_ids), r.finish_reason))
        self.finished = r.finish_reason == "length"
        return r.finish_reason, r.weight_version


# -- training ----------------------------------------------------------------------------

def reward(sample):
    return sum(1 for t in sample.output_ids if t % 2 == 0) / len(sample.output_ids)


def grpo_stats(groups):
    """(mean reward, policy-gradient loss -mean(A * mean token log-prob)) with GRPO's advantages
    (r - mean of the group) / (std of the group + 1e-6)."""
    rewards, losses = [], []
    for samples in groups:
        r = [reward(s) for s in samples]
        mean = sum(r) / len(r)
        std = (sum((x - mean) ** 2 for x in r) / len(r)) ** 0.5
        for s, x in zip(samples, r):
            advantage = (x - mean) / (std + 1e-6)
            losses.append(-advantage * sum(s.output_token_logprobs) / len(s.output_token_logprobs))
        rewards += r
    return sum(rewards) / len(rewards), sum(losses) / len(losses)


def weight_files(model_dir):
    """The safetensors files the server loads from model_dir: the index's, else model.safetensors."""
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        return sorted(set(json.loads(index.read_text())["weight_map"].values()))
    return ["model.safetensors"]


def train_step(src_dir, dst_dir, tensor_name, step_size, seed):
    """Writes dst_dir: src_dir's checkpoint with tensor_name moved by a seeded Gaussian step of
    step_size x its RMS, stored as BF16; its other weight files and every non-weight file copied."""
    dst_dir.mkdir(parents=True)
    files = weight_files(src_dir)
    for f in src_dir.iterdir():
        if f.is_file() and f.suffix != ".safetensors":
            shutil.copyfile(f, dst_dir / f.name)  # config, tokenizer, index
    found = False
    for name in files:
        tensors, metadata = safetensors_io.read(src_dir / name)
        if tensor_name in tensors:
            t = tensors[tensor_name]
            w = safetensors_io.to_floats(t)
            rms = (sum(x * x for x in w) / len(w)) ** 0.5
            rng = random.Random(seed)
            moved = [x + step_size * rms * rng.gauss(0.0, 1.0) for x in w]
            tensors[tensor_name] = safetensors_io.from_floats(moved, "BF16", t.shape)
            found = True
        safetensors_io.write(dst_dir / name, tensors, metadata)
    check(found, f"no tensor {tensor_name} in {src_dir} ({', '.join(files)})")


# -- the loop ----------------------------------------------------------------------------

def update_weights(client, checkpoint, version):
    """slime's sequence around an update; returns the seconds the server was paused."""
    t0 = time.time()
    client.pause(mode="abort")
    client.flush_cache()
    served = client.update_weights_from_disk(str(checkpoint), weight_version=version)
    client.resume()
    check(served == version and client.weight_version() == version,
          f"serving {client.weight_version()} (update answered {served}), expected {version}")
    return time.time() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("base_url", help="http://HOST:PORT of hart serve --http-bind")
    p.add_argument("--api-key", help="the server's --api-key")
    p.add_argument("--model-dir", help="the checkpoint the server serves now (default: /model_info's model_path, "
                                       "the one it started with)")
    p.add_argument("--out", required=True, help="directory for the new checkpoints (step-1, step-2, ...)")
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--group", type=int, default=4, help="samples per prompt")
    p.add_argument("--prompt-len", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--tensor", default="head.weight", help="the tensor the toy step moves")
    p.add_argument("--step-size", type=float, default=0.05, help="the toy step, relative to the tensor's RMS")
    p.add_argument("--straggler-tokens", type=int, default=4096, help="the straggler's token budget")
    args = p.parse_args()

    client = HartClient(args.base_url, api_key=args.api_key)
    served_dir = Path(args.model_dir or client.model_info()["model_path"]).resolve()
    out = Path(args.out).resolve()
    vocab_size = json.loads((served_dir / "config.json").read_text())["vocab_size"]
    rng = random.Random(0)
    # Token ids 0 and 1 are BOS and EOS in DeepSeek's vocabularies; prompts avoid them.
    prompts = [[rng.randrange(2, vocab_size) for _ in range(args.prompt_len)] for _ in range(args.prompts)]
    straggler = Straggler(client, [rng.randrange(2, vocab_size) for _ in range(args.prompt_len)],
                          args.straggler_tokens)
    first_version = int(client.weight_version())
    print(f"serving {served_dir} at weight version {first_version}; checkpoints to {out}", flush=True)

    for iteration in range(1, args.iterations + 1):
        version, new_version = str(first_version + iteration - 1), str(first_version + iteration)
        t0 = time.time()
        straggling = not straggler.finished
        if straggling:
            straggler.resume(iteration)
        groups = rollout(client, prompts, args, iteration, version)
        mean_reward, loss = grpo_stats(groups)
        n_tokens = sum(len(s.output_ids) for g in groups for s in g)
        rollout_s = time.time() - t0

        checkpoint = out / f"step-{iteration}"
        train_step(served_dir, checkpoint, args.tensor, args.step_size, seed=iteration)
        probe_before = client.generate(**PROBE)
        paused_s = update_weights(client, checkpoint, new_version)
        if straggling:
            finish, straggler_version = straggler.join()
            check(finish in ("abort", "length") and straggler_version == version,
                  f"straggler segment {iteration}: {finish} at version {straggler_version}, expected {version}")
        probe_after = client.generate(**PROBE)
        check(probe_after.weight_version == new_version, f"probe at version {probe_after.weight_version}")
        check(probe_after.output_token_logprobs != probe_before.output_token_logprobs,
              f"{checkpoint} answers as the weights before it did")
        served_dir = checkpoint
        print(f"iteration {iteration}: version {version}, {n_tokens} tokens in {rollout_s:.2f} s, "
              f"reward {mean_reward:.3f}, pg loss {loss:+.4f}; straggler at {len(straggler.tokens)} tokens; "
              f"{checkpoint.name} serving as {new_version} after {paused_s:.2f} s paused", flush=True)

    final = str(first_version + args.iterations)
    rollout(client, prompts, args, args.iterations + 1, final)
    print(f"straggler segments (version, tokens, finish): {straggler.segments}")
    print(f"final rollout at version {final}: ok")


if __name__ == "__main__":
    main()
