// The GPT-2 byte <-> character alphabet behind the ByteLevel pre-tokenizer and decoder.
//
// Every byte maps to one printable code point (printable Latin-1 bytes to themselves, the rest to
// U+0100 and up), so vocab entries are valid strings even when a token holds part of a character.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace q38::byte_level {

// Code point that stands for byte `b`.
uint32_t ByteToCodepoint(uint8_t b);

// Appends the alphabet form of raw `bytes` (what a vocab entry looks like).
void EncodeBytes(std::string_view bytes, std::string* out);

// Appends the raw bytes of a token written in the alphabet. Returns false, appending nothing,
// when some character of `token` is outside the alphabet (HF then keeps the token's UTF-8 as is).
bool DecodeToken(std::string_view token, std::string* out);

}  // namespace q38::byte_level
