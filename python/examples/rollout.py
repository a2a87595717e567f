"""Rollouts for RL: a batch of prompts, several samples each, with the log-prob of every sampled
token and the weight version that made it, sent from a thread pool (each request is one
/generate with n samples; the server batches them all).

  python3 python/examples/rollout.py http://127.0.0.1:30000 "1 + 1 =" "The capital of France is" --samples 4
"""
import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # hart_client without installing it

from hart_client import HartClient  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("base_url", help="http://HOST:PORT of hart serve --http-bind")
    p.add_argument("prompts", nargs="*", default=["Once upon a time", "def fib(n):", "The answer is"])
    p.add_argument("--api-key", help="the server's --api-key")
    p.add_argument("--samples", type=int, default=4, help="samples per prompt (n)")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0, help="sample i of prompt k uses seed + k * samples + i")
    p.add_argument("--threads", type=int, default=8)
    args = p.parse_intermixed_args()

    client = HartClient(args.base_url, api_key=args.api_key)

    def sample(k):
        params = {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "n": args.samples,
                  "sampling_seed": args.seed + k * args.samples}
        out = client.generate(text=args.prompts[k], sampling_params=params, return_logprob=True)
        return out if isinstance(out, list) else [out]

    with ThreadPoolExecutor(args.threads) as pool:
        for prompt, samples in zip(args.prompts, pool.map(sample, range(len(args.prompts)))):
            print(f"{prompt!r} ({samples[0].prompt_tokens} prompt tokens, {samples[0].cached_tokens} cached)")
            for s in samples:
                print(f"  [{s.index}] {s.finish_reason:6} {len(s.output_ids):3} tokens, "
                      f"log-prob {sum(s.output_token_logprobs):8.2f}, weights v{s.weight_version}: {s.text!r}")


if __name__ == "__main__":
    main()
