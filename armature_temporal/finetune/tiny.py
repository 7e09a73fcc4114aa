"""A tiny, randomly initialised causal LM written offline, for tests and demos.

:func:`create_tiny_model` saves a real transformers model (GPT-2 architecture, two layers,
64-wide) and a byte-level BPE tokenizer trained on the fly on a small built-in corpus, so
``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained`` load it and the
whole fine-tune loop (train a LoRA adapter, generate with ``provider: local``) runs without a
download. Untrained, its replies are noise; it only becomes useful after training.

Needs the finetune extra (torch, transformers); importing this module does not.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

__all__ = ["CHAT_TEMPLATE", "DEMO_NOUNS", "EOS_TOKEN", "create_tiny_model"]

EOS_TOKEN = "<|endoftext|>"

#: 24 nouns for the declared text tasks the tests and benchmarks train the tiny model on
#: ("What colour is the {noun}?" → "The {noun} is blue.", and the like).
DEMO_NOUNS = (
    "apple",
    "river",
    "stone",
    "cloud",
    "maple",
    "tiger",
    "lemon",
    "ocean",
    "piano",
    "candle",
    "garden",
    "rocket",
    "forest",
    "silver",
    "planet",
    "window",
    "shadow",
    "bridge",
    "violet",
    "marble",
    "copper",
    "falcon",
    "meadow",
    "harbor",
)

# A minimal chat template: "<|role|>\ncontent\n" per message, then "<|assistant|>\n".
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

_WORDS_TEXT = """
the of and to a in is it you that he was for on are with as I his they be at one have this
from or had by hot word but what some we can out other were all there when up use your how
said an each she which do their time if will way about many then them write would like so
these her long make thing see him two has look more day could go come did number sound no
most people my over know water than call first who may down side been now find any new work
part take get place made live where after back little only round man year came show every
good me give our under name very through just form sentence great think say help low line
differ turn cause much mean before move right boy old too same tell does set three want air
well also play small end put home read hand port large spell add even land here must big
high such follow act why ask men change went light kind off need house picture try us again
animal point mother world near build self earth father head stand own page should country
found answer school grow study still learn plant cover food sun four between state keep eye
never last let thought city tree cross farm hard start might story saw far sea draw left
late run while press close night real life few north open seem together next white children
begin got walk example ease paper group always music those both mark often letter until mile
river car feet care second book carry took science eat room friend began idea fish mountain
stop once base hear horse cut sure watch colour color face wood main enough plain girl usual
young ready above ever red list though feel talk bird soon body dog family direct pose leave
song measure door product black short numeral class wind question happen complete ship area
half rock order fire south problem piece told knew pass since top whole king space heard
best hour better true during hundred five remember step early hold west ground interest
reach fast verb sing listen six table travel less morning ten simple several vowel toward
war lay against pattern slow center love person money serve appear road map rain rule govern
pull cold notice voice unit power town fine certain fly fall lead cry dark machine note wait
plan figure star box noun field rest correct able pound done beauty drive stood contain
front teach week final gave green oh quick develop ocean warm free minute strong special
mind behind clear tail produce fact street inch multiply nothing course stay wheel full
force blue object decide surface deep moon island foot system busy test record boat common
gold possible plane stead dry wonder laugh thousand ago ran check game shape equate miss
brought heat snow tire bring yes distant fill east paint language among echo reply user
system assistant summary json true false null error status ok yes no name value result input
output task stage run
"""
_WORDS = _WORDS_TEXT.split()


def _corpus() -> list[str]:
    printable = string.printable
    lines = [printable, printable.upper(), " ".join(string.ascii_letters)]
    lines.extend(" ".join(_WORDS[i : i + 12]) for i in range(0, len(_WORDS), 12))
    lines.extend(w.capitalize() + ". " + w.upper() + "!" for w in _WORDS)
    lines.extend(
        f"<|{role}|>\n{text}\n" for role in ("system", "user", "assistant") for text in _WORDS[:40]
    )
    lines.extend(str(n) for n in range(200))
    lines.append('{"status": "ok", "value": 1, "items": [true, false, null]}')
    return lines


def _tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        min_frequency=2,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_corpus(), trainer=trainer)
    fast: Any = PreTrainedTokenizerFast  # untyped constructor
    tokenizer = fast(
        tokenizer_object=backend,
        eos_token=EOS_TOKEN,
        bos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        unk_token=EOS_TOKEN,
        model_max_length=512,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def create_tiny_model(path: Path, *, seed: int = 0) -> Path:
    """Write a tiny, randomly initialised causal LM and its tokenizer to ``path``.

    It is a real transformers model (GPT-2 architecture: 2 layers, 2 heads, 64 wide, 512
    positions, a 1,024-token byte-level BPE vocabulary) for tests and offline demos. Its
    replies are noise until trained. Nothing is downloaded; the same ``seed`` gives the same
    weights. Returns ``path``.
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    path = Path(path)
    tokenizer = _tokenizer()
    eos_id = int(tokenizer.eos_token_id)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=512,
        n_embd=64,
        n_layer=2,
        n_head=2,
        initializer_range=0.2,  # wider than GPT-2's 0.02, so LoRA can move the logits
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
    )
    from armature_temporal.hf_loading import LOAD_LOCK

    with LOAD_LOCK:  # another thread's from_pretrained would leave its weights untied
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(config)
    model.generation_config.pad_token_id = eos_id
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m armature_temporal.finetune.tiny DIR``: write the tiny model to DIR."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m armature_temporal.finetune.tiny DIR", file=sys.stderr)
        return 2
    target = Path(args[0])
    if target.exists() and any(target.iterdir()):
        print(f"error: {target} exists and is not empty; choose a new directory", file=sys.stderr)
        return 2
    try:
        create_tiny_model(target)
    except ImportError as exc:
        print(
            f"error: {exc}; the tiny model needs the finetune extra: pip install torch "
            "transformers peft",
            file=sys.stderr,
        )
        return 1
    print(f"wrote a tiny untrained model to {target} (replies are noise until trained)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
