"""Drives framezip's OpenAI-compatible API with the official `openai` client.

Usage: check_openai_client.py BASE_URL MODEL VIDEO Q1 Q2 Q3
For each mode (plain, streamed) it asks a video question, then holds a three-turn conversation
about the video, resending the whole conversation each turn as a stateless client does. Prints
one JSON object: {"plain": [turn...], "stream": [turn...]}, each turn {"answer", "prompt_tokens",
"cached_tokens", "finish_reason"}. Exits non-zero on any client error.
"""

import base64
import json
import sys

import openai


def ask(client, model, messages, stream):
    if not stream:
        r = client.chat.completions.create(model=model, messages=messages, temperature=0,
                                           max_tokens=200)
        usage = r.usage
        return {"answer": r.choices[0].message.content,
                "finish_reason": r.choices[0].finish_reason,
                "prompt_tokens": usage.prompt_tokens,
                "cached_tokens": usage.prompt_tokens_details.cached_tokens}
    text, finish, usage = "", None, None
    for chunk in client.chat.completions.create(model=model, messages=messages, temperature=0,
                                                max_tokens=200, stream=True,
                                                stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                text += choice.delta.content
            if choice.finish_reason:
                finish = choice.finish_reason
    return {"answer": text, "finish_reason": finish, "prompt_tokens": usage.prompt_tokens,
            "cached_tokens": usage.prompt_tokens_details.cached_tokens}


def main():
    base_url, model, video, questions = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:7]
    with open(video, "rb") as f:
        url = "data:video/mp4;base64," + base64.b64encode(f.read()).decode()
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=60)
    listed = [m.id for m in client.models.list().data]
    if listed != [model]:
        raise SystemExit(f"models.list() gave {listed}, not [{model!r}]")
    out = {}
    for mode in ("plain", "stream"):
        messages = []
        turns = []
        for i, question in enumerate(questions):
            content = [{"type": "text", "text": question}]
            if i == 0:
                content.insert(0, {"type": "video_url", "video_url": {"url": url}})
            messages.append({"role": "user", "content": content})
            turn = ask(client, model, messages, mode == "stream")
            messages.append({"role": "assistant", "content": turn["answer"]})
            turns.append(turn)
        out[mode] = turns
    # An error comes back as the client's typed exception with OpenAI's error body.
    try:
        client.chat.completions.create(model=model, n=3,
                                       messages=[{"role": "user", "content": "hi"}])
        raise SystemExit("n=3 was accepted")
    except openai.BadRequestError as e:
        out["n3_error"] = e.body.get("message", "") if isinstance(e.body, dict) else str(e.body)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
