#pragma once
// fsdpp's tokenizers as Hugging Face tokenizer files, so that transformers'
// AutoTokenizer.from_pretrained(dir) on an exported model encodes text to the ids fsdpp trained
// on, and decodes them back.
//
//   for (const auto& [name, bytes] : fsdpp::data::hf_tokenizer_files(*tok, 256)) write(dir / name, bytes);
//
// Files: tokenizer.json (for the `tokenizers` library) and tokenizer_config.json
// (PreTrainedTokenizerFast, no BOS or EOS added: fsdpp adds none), plus tokenizer.model for
// SentencePiece (what LlamaTokenizer and fsdpp itself read).
//
// TokenizerJson (a Hugging Face tokenizer that fsdpp read): its own files, verbatim
//   (tokenizer.json, and tokenizer_config.json and chat_template.jinja where it came with them);
//   without a tokenizer_config.json, one naming its special tokens is written. The exported
//   model speaks the tokenizer it was trained with.
//
// byte: a BPE without merges over the 256 single-byte tokens behind a ByteLevel pre-tokenizer
//   (no regex split, no prefix space). ByteLevel shows byte b as GPT-2's printable character for
//   b; the vocabulary maps that character to id b, so id == byte as in fsdpp, for any text.
// SentencePiece (BPE, fsdpp's settings: identity normalisation, whitespace kept, no dummy
//   prefix): spaces become "▁", the model's pieces with merges ranked by the score of the piece
//   they make (as SentencePiece merges), user-defined pieces (fsdpp's "\n") as added tokens that
//   split the text first, unknown characters as one fused <unk> or as <0xXX> bytes when the model
//   has byte fallback. Control pieces (<s>, </s>) are not special tokens: fsdpp never adds them
//   and SentencePiece never matches them in text. A model trained with other settings (a dummy
//   prefix, another normaliser, unigram) gets tokenizer.model and a LlamaTokenizer config only:
//   transformers converts it itself (with Python's sentencepiece package), which need not match
//   SentencePiece exactly. The tokenizer.json route needs no sentencepiece in Python.

#include <cstdint>
#include <map>
#include <string>

#include "fsdpp/data/tokenizer.h"

namespace fsdpp::data {

// File name -> contents. `model_max_length` is written into tokenizer_config.json (the model's
// max_seq_len).
std::map<std::string, std::string> hf_tokenizer_files(const Tokenizer& tok, int64_t model_max_length);

}  // namespace fsdpp::data
