"""statickv-serve --http's chat prompts equal transformers' apply_chat_template
for templates built the way the model families' templates are (Llama 3,
Mistral, Qwen2/Qwen3, Gemma, and one with tojson and {% generation %}).

usage: check_chat_templates.py STATICKV_SERVE WORKDIR   (a Python with torch,
       transformers, tokenizers; statickv-serve built with --http)

For each template: the tiny checkpoint of check_http.py with that template in
its tokenizer_config.json, one statickv-serve --http on it, and for each
conversation below POST /v1/chat/completions (max_tokens 1): the response's
prompt_token_ids must equal transformers' apply_chat_template(...,
add_generation_prompt=True) ids from the same directory, and a conversation
the template refuses (raise_exception) must be a 400 carrying the template's
own message, as transformers raises it. The templates are written here to
exercise each family's Jinja constructs (whitespace control, namespace(),
strftime_now, slicing, role mapping, | trim, | tojson, raise_exception,
loop.first/last/index0, {% generation %}), not copied from any checkpoint.
"""

import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_http as h  # noqa: E402

from transformers import AutoTokenizer  # noqa: E402

LLAMA3 = (
    "{{- bos_token }}\n{%- if not date_string is defined %}\n"
    "  {%- set date_string = strftime_now('%d %b %Y') %}\n{%- endif %}\n"
    "{%- if messages[0]['role'] == 'system' %}\n"
    "  {%- set system_message = messages[0]['content'] | trim %}\n"
    "  {%- set messages = messages[1:] %}\n{%- else %}\n  {%- set system_message = '' %}\n"
    "{%- endif %}\n"
    "{{- '<|im_start|>system\\n\\nToday Date: ' + date_string + '\\n\\n' + system_message"
    " + '<|im_end|>' }}\n"
    "{%- for message in messages %}\n"
    "  {{- '<|im_start|>' + message['role'] + '\\n\\n' + message['content'] | trim"
    " + '<|im_end|>' }}\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n  {{- '<|im_start|>assistant\\n\\n' }}\n{%- endif %}\n")
MISTRAL = (
    "{{- bos_token }}\n{%- for message in messages %}\n"
    "  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
    "    {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant') }}\n"
    "  {%- endif %}\n  {%- if message['role'] == 'user' %}\n"
    "    {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n"
    "  {%- elif message['role'] == 'assistant' %}\n"
    "    {{- ' ' + message['content'] + eos_token }}\n  {%- endif %}\n{%- endfor %}\n")
QWEN = (
    "{%- if messages[0].role == 'system' %}\n"
    "  {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n{%- else %}\n"
    "  {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}\n{%- endif %}\n"
    "{%- set ns = namespace(last_user=-1) %}\n{%- for message in messages %}\n"
    "  {%- if message.role == 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}\n"
    "{%- endfor %}\n{%- for message in messages %}\n"
    "  {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}\n"
    "    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}\n"
    "  {%- elif message.role == 'assistant' %}\n"
    "    {{- '<|im_start|>assistant\\n' }}"
    "{%- if loop.index0 > ns.last_user %}<think>\\n\\n</think>\\n\\n{%- endif %}"
    "{{- message.content + '<|im_end|>\\n' }}\n  {%- endif %}\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n  {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n")
GEMMA = (
    "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n"
    "  {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
    "  {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n"
    "  {%- set first_user_prefix = '' -%}\n  {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n{%- for message in loop_messages -%}\n"
    "  {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}\n"
    "  {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') }}\n"
    "  {{- message['content'] | trim }}\n  {{- '<end_of_turn>\\n' }}\n{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n  {{ '<start_of_turn>model\\n' }}\n{%- endif -%}\n")
TOJSON = (
    "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}"
    "{{ m.content }}{% endgeneration %}{% else %}{{ m | tojson }}{% endif %}"
    "{% if not loop.last %}\n{% endif %}{% endfor %}{{ eos_token if add_generation_prompt }}")
TEMPLATES = {"llama3": LLAMA3, "mistral": MISTRAL, "qwen": QWEN, "gemma": GEMMA,
             "tojson": TOJSON}

CONVERSATIONS = [
    [{"role": "system", "content": "  Answer briefly.  "},
     {"role": "user", "content": "What is a cache?"},
     {"role": "assistant", "content": "A store."}, {"role": "user", "content": "And a row?"}],
    # ASCII only: the tiny tokenizer's alphabet has no other bytes.
    [{"role": "user", "content": "hello {{ not jinja }} \"quoted\" {% raw %}"}],
    [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
     {"role": "user", "content": "  three  "}],
]


def with_template(tiny, work, name, template):
    """A copy of the tiny checkpoint whose tokenizer_config.json has `template`."""
    out = work / name
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(tiny, out)
    config = json.loads((out / "tokenizer_config.json").read_text())
    config["chat_template"] = template
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


def transformers_answer(hf_tok, messages):
    """('ids', ids) or ('error', message) as apply_chat_template gives them."""
    try:
        return "ids", h.chat_ids(hf_tok, messages)
    except Exception as e:  # noqa: BLE001 - the template's own refusal is the answer
        return "error", str(e)


def check_template(c, exe, directory, name):
    hf_tok = AutoTokenizer.from_pretrained(str(directory))
    flags = ["--device", "cpu", "--dtype", "fp32", "--threads", "1", "--max-len", "256"]
    server = h.Server(exe, [*flags, "--checkpoint", str(directory), "--max-batch", "2"])
    try:
        for i, messages in enumerate(CONVERSATIONS):
            kind, want = transformers_answer(hf_tok, messages)
            status, _, body = h.call(server.port, "POST", "/v1/chat/completions",
                                     {"messages": messages, "max_tokens": 1, "temperature": 0})
            if kind == "ids":
                got = json.loads(body).get("prompt_token_ids") if status == 200 else body[:200]
                c(status == 200 and got == want,
                  f"{name} conversation {i}: prompt ids equal transformers' ({len(want)} ids)"
                  + ("" if got == want else f": got {got}, want {want}"))
            else:
                message = h.error_of(body).get("message", "")
                c(status == 400 and want in message,
                  f"{name} conversation {i}: refused as transformers refuses it ({want!r}): "
                  f"{status} {message!r}")
    finally:
        c(server.stop() == 0, f"{name}: SIGTERM, exit status 0")


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    exe, work = sys.argv[1], Path(sys.argv[2])
    work.mkdir(parents=True, exist_ok=True)
    tiny = work / "tiny"
    h.make_checkpoint(tiny)
    c = h.Checks()
    for name, template in TEMPLATES.items():
        c.run(name, check_template, c, exe, with_template(tiny, work, name, template), name)
    print(f"\n{len(c.failures)} failures")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
