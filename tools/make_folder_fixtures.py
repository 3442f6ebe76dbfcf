#!/usr/bin/env python3
"""make_folder_fixtures.py — tests/data/folders: the folder layouts of
Fast-dLLM v2, SDAR and LLaDA-8B-Instruct as published (config.json,
generation_config.json, tokenizer_config.json, tokenizer.json), shrunk onto
the tiny random models the golden tests already hold, so that the engine
loads them (tests/engine/test_folders.c).

    python3 tools/make_folder_fixtures.py            # from the repository root

Deterministic; only the standard library. What is kept from each published
folder: the files present, their keys, which of them are absent (Fast-dLLM
v2's config.json has no mask_token_id; LLaDA-8B-Instruct's no
bos_token_id), the special tokens' names, order and flags, the
generation_config.json stop lists and the tokenizer_config.json settings
(add_bos_token, bos_token, tokenizer_class, mask_token). What is changed: the
shapes and torch_dtype (those of the tiny model whose weights the folder
links to), the vocabulary (the tiny models' 256 or 512 ids: Qwen's added
tokens keep their order and end at id 255; of LLaDA's, five are kept, at
507-511) and so every id. Where the published files were read:
tests/data/folders/README.md."""
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "folders"


def write(path, obj):
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def link(folder, target):
    dst = folder / "model.safetensors"
    if dst.is_symlink() or dst.exists():
        dst.unlink()
    os.symlink(os.path.relpath(ROOT / target, folder), dst)


def added(tid, content, special):
    return {"id": tid, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special}


def decoder_entry(content, special):
    return {"content": content, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
            "special": special}


QWEN25_SPECIALS = [  # 151643 ...: Qwen2.5's added tokens, (content, special)
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
    ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False)]
QWEN3_SPECIALS = QWEN25_SPECIALS + [("<tool_response>", False), ("</tool_response>", False), ("<think>", False),
                                    ("</think>", False)]
FAST_SPECIALS = QWEN25_SPECIALS + [("|<MASK>|", True)]   # 151643 .. 151665
SDAR_SPECIALS = QWEN3_SPECIALS + [("<|MASK|>", False)]   # 151643 .. 151669
QWEN_FIRST = 151643
VOCAB = 256  # the tiny models' rows


def qwen_tokenizer(specials):
    """Qwen2's tokenizer.json (its pre-tokenizer, ByteLevel post-processor
    and decoder: the golden Qwen2 tokenizer's) with its first byte-level
    tokens (printable ASCII, space and newline among them) and no merges,
    then the specials, ending at id 255: every id of the tiny model is a
    token."""
    first = VOCAB - len(specials)
    src = json.loads((ROOT / "tests/data/golden/qwen2-bias/tokenizer.json").read_text(encoding="utf-8"))
    vocab = {k: v for k, v in src["model"]["vocab"].items() if v < first}
    assert len(vocab) == first and vocab["\u0120"] == 220 and vocab["\u010a"] == 198
    src["model"]["vocab"] = vocab
    src["model"]["merges"] = []
    src["added_tokens"] = [added(first + i, c, sp) for i, (c, sp) in enumerate(specials)]
    return src


def remap(specials):
    """A published Qwen id (151643 + k) to the fixture's."""
    first = VOCAB - len(specials)
    return lambda p: first + (p - QWEN_FIRST)


def fast_dllm_v2():
    """Efficient-Large-Model/Fast_dLLM_v2_7B: Qwen2.5's specials, then
    "|<MASK>|" (151665); config.json names no mask token."""
    d = OUT / "fast-dllm-v2"
    d.mkdir(parents=True, exist_ok=True)
    i = remap(FAST_SPECIALS)
    write(d / "tokenizer.json", qwen_tokenizer(FAST_SPECIALS))
    write(d / "config.json", {
        "architectures": ["Fast_dLLM_QwenForCausalLM"],
        "attention_dropout": 0.0,
        "auto_map": {"AutoConfig": "configuration.Fast_dLLM_QwenConfig", "AutoModel": "modeling.Fast_dLLM_QwenModel",
                     "AutoModelForCausalLM": "modeling.Fast_dLLM_QwenForCausalLM"},
        "bd_size": 32,
        "bos_token_id": i(151643),
        "conplemenrary_mask": True,
        "eos_token_id": i(151645),
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 128,
        "layer_types": ["full_attention", "full_attention"],
        "max_position_embeddings": 32768,
        "max_window_layers": 2,
        "model_type": "Fast_dLLM_Qwen",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "pad_token_id": i(151645),
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.53.1",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": VOCAB,
    })
    write(d / "generation_config.json", {
        "bos_token_id": i(151643), "do_sample": True, "eos_token_id": [i(151645), i(151643)],
        "pad_token_id": i(151643), "repetition_penalty": 1.05, "temperature": 0.7, "top_k": 20, "top_p": 0.8,
        "transformers_version": "4.53.1"})
    write(d / "tokenizer_config.json", {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {str(i(QWEN_FIRST + k)): decoder_entry(c, sp)
                                 for k, (c, sp) in enumerate(FAST_SPECIALS)},
        "additional_special_tokens": ["|<MASK>|"],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "extra_special_tokens": {},
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "padding_side": "right",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    })
    link(d, "tests/data/golden/block-diffusion/fast-dllm-v2-tiny/model.safetensors")


def sdar():
    """JetLM/SDAR-4B-Chat: Qwen3's specials, then "<|MASK|>" (151669,
    special false); config.json stops at <|endoftext|>, generation_config.json
    at [<|im_end|>, <|endoftext|>]."""
    d = OUT / "sdar"
    d.mkdir(parents=True, exist_ok=True)
    i = remap(SDAR_SPECIALS)
    write(d / "tokenizer.json", qwen_tokenizer(SDAR_SPECIALS))
    write(d / "config.json", {
        "architectures": ["SDARForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_sdar.SDARConfig", "AutoModel": "modeling_sdar.SDARModel",
                     "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM"},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_implementation": "flex_attention",
        "bos_token_id": i(151643),
        "debug": False,
        "eos_token_id": i(151643),
        "block_size": 4,
        "mask_token_id": i(151669),
        "ep_size": 1,
        "fuse_cross_entropy": True,
        "head_dim": 32,
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 128,
        "max_position_embeddings": 32768,
        "max_window_layers": 2,
        "micro_forward": False,
        "model_type": "sdar",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "skip_checkpoint": False,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.52.4",
        "use_cache": False,
        "use_deepep": False,
        "use_sliding_window": False,
        "vocab_size": VOCAB,
    })
    write(d / "generation_config.json", {
        "bos_token_id": i(151643), "do_sample": True, "eos_token_id": [i(151645), i(151643)],
        "pad_token_id": i(151643), "temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"})
    write(d / "tokenizer_config.json", {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {str(i(QWEN_FIRST + k)): decoder_entry(c, sp)
                                 for k, (c, sp) in enumerate(SDAR_SPECIALS)},
        "additional_special_tokens": [c for c, sp in SDAR_SPECIALS[1:14]] + ["<|MASK|>"],
        "auto_map": {"AutoTokenizer": ["tokenization_qwen2.Qwen2Tokenizer", None]},
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|endoftext|>",
        "mask_token": "<|MASK|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    })
    link(d, "tests/data/golden/block-diffusion/sdar-tiny/model.safetensors")


LLADA_TEMPLATE = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
                  "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
                  "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
                  "{{ content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}")


def llada():
    """GSAI-ML/LLaDA-8B-Instruct: config.json without bos_token_id;
    <|startoftext|> 126080 (507 here), <|endoftext|> 126081 (508), <|eot_id|>
    126348 (509), <|mdm_mask|> 126336 (510), <|start_header_id|> 126346 (511);
    tokenizer_config.json's add_bos_token false
    with tokenizer_class PreTrainedTokenizerFast. Its tokenizer.json's
    post_processor was not seen: here it is the Llama-3 template putting
    <|startoftext|> before the text (tests/engine/test_folders.c checks the
    rule both ways)."""
    d = OUT / "llada"
    d.mkdir(parents=True, exist_ok=True)
    tok = json.loads((ROOT / "models/tiny-llada-random/tokenizer.json").read_text(encoding="utf-8"))
    rename = {"<|begin_of_text|>": "<|startoftext|>", "<|end_of_text|>": "<|endoftext|>",
              "<tool>": "<|start_header_id|>"}
    for a in tok["added_tokens"]:
        a["special"] = a["special"] or a["content"] == "<tool>"
        a["content"] = rename.get(a["content"], a["content"])
    ids = {a["content"]: a["id"] for a in tok["added_tokens"]}
    assert ids["<|startoftext|>"] == 507 and ids["<|endoftext|>"] == 508 and ids["<|mdm_mask|>"] == 510
    text = json.dumps(tok, ensure_ascii=False).replace("<|begin_of_text|>", "<|startoftext|>")
    tok = json.loads(text)
    (d / "tokenizer.json").write_text(json.dumps(tok, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    src = json.loads((ROOT / "tests/data/golden-diffusion/llada-tiny/config.json").read_text(encoding="utf-8"))
    write(d / "config.json", {
        "activation_type": "silu",
        "alibi": False,
        "alibi_bias_max": 8.0,
        "architectures": ["LLaDAModelLM"],
        "attention_dropout": 0.0,
        "attention_layer_norm": False,
        "attention_layer_norm_with_affine": True,
        "auto_map": {"AutoConfig": "configuration_llada.LLaDAConfig", "AutoModel": "modeling_llada.LLaDAModelLM",
                     "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM"},
        "bias_for_layer_norm": False,
        "block_group_size": 1,
        "block_type": "llama",
        "d_model": src["d_model"],
        "embedding_dropout": 0.0,
        "embedding_size": src["embedding_size"],
        "eos_token_id": 508,
        "flash_attention": False,
        "include_bias": False,
        "include_qkv_bias": False,
        "init_cutoff_factor": None,
        "init_device": "meta",
        "init_fn": "mitchell",
        "init_std": 0.02,
        "input_emb_norm": False,
        "layer_norm_type": "rms",
        "layer_norm_with_affine": True,
        "mask_token_id": 510,
        "max_sequence_length": src["max_sequence_length"],
        "mlp_hidden_size": src["mlp_hidden_size"],
        "mlp_ratio": 4,
        "model_type": "llada",
        "multi_query_attention": None,
        "n_heads": src["n_heads"],
        "n_kv_heads": src["n_kv_heads"],
        "n_layers": src["n_layers"],
        "pad_token_id": 508,
        "precision": "amp_bf16",
        "residual_dropout": 0.0,
        "rms_norm_eps": 1e-05,
        "rope": True,
        "rope_full_precision": True,
        "rope_theta": 500000.0,
        "scale_logits": False,
        "torch_dtype": "float32",
        "transformers_version": "4.46.2",
        "use_cache": False,
        "vocab_size": src["vocab_size"],
        "weight_tying": False,
    })
    write(d / "generation_config.json", {
        "_from_model_config": True, "bos_token_id": 507, "eos_token_id": 508, "transformers_version": "4.46.2"})
    write(d / "tokenizer_config.json", {
        "add_bos_token": False,
        "add_eos_token": False,
        "added_tokens_decoder": {str(a["id"]): decoder_entry(a["content"], a["special"]) for a in tok["added_tokens"]},
        "additional_special_tokens": ["<|mdm_mask|>"],
        "bos_token": "<|startoftext|>",
        "chat_template": LLADA_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|endoftext|>",
        "fast_tokenizer": True,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 1000000000000000019884624838656,
        "pad_token": "<|endoftext|>",
        "tokenizer_class": "PreTrainedTokenizerFast",
        "trust_remote_code": True,
    })
    link(d, "tests/data/golden-diffusion/llada-tiny/model.safetensors")


if __name__ == "__main__":
    fast_dllm_v2()
    sdar()
    llada()
