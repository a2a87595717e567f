"""Streaming chat over OpenAI's /v1/chat/completions: the answer printed as it comes, the
reasoning first in thinking mode, then the token usage.

  python3 python/examples/chat.py http://127.0.0.1:30000 "Why is the sky blue?" --thinking
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # hart_client without installing it

from hart_client import HartClient  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("base_url", help="http://HOST:PORT of hart serve --http-bind")
    p.add_argument("message", nargs="?", default="Hello! Who are you?")
    p.add_argument("--api-key", help="the server's --api-key")
    p.add_argument("--system", help="a system message first")
    p.add_argument("--thinking", action="store_true", help="DeepSeek-V4's thinking mode")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=1.0)
    args = p.parse_intermixed_args()

    messages = ([{"role": "system", "content": args.system}] if args.system else []) + \
        [{"role": "user", "content": args.message}]
    client = HartClient(args.base_url, api_key=args.api_key)
    in_reasoning = False
    for delta in client.chat_stream(messages, max_tokens=args.max_tokens, temperature=args.temperature,
                                    chat_template_kwargs={"thinking": args.thinking}):
        if delta.usage:
            u = delta.usage
            print(f"\n[{u['prompt_tokens']} prompt tokens ({u['prompt_tokens_details']['cached_tokens']} cached), "
                  f"{u['completion_tokens']} completion tokens]")
            continue
        if delta.reasoning_content and not in_reasoning:
            print("[thinking] ", end="")
            in_reasoning = True
        if delta.content and in_reasoning:
            print("\n[answer] ", end="")
            in_reasoning = False
        print(delta.reasoning_content + delta.content, end="", flush=True)
        if delta.finish_reason:
            print(f"\n[finish: {delta.finish_reason}]", end="")


if __name__ == "__main__":
    main()
