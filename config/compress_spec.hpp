#pragma once
// The value of the `compress` configuration key: which modules' saved
// activations are stored compressed, and how.
//
// Note [Compress key grammar]
//   spec     := method | rule { ";" rule }
//   rule     := selector "=" method
//   method   := pool2 | bf16 | fp8 | none            (case-insensitive)
//   selector := a module class name (Conv2d, ReLU, BatchNorm2d) | "*"
// A bare method is shorthand: pool2 means Conv2d=pool2, bf16 and fp8 mean
// *=bf16 and *=fp8, none means off. Blanks around selectors and methods are
// trimmed. This is the grammar of python/tensorpager/techniques/compress.py (which
// applies it: compress.enable() once torch is imported) restricted to what
// works process-wide: a glob over qualified module names ("layer1.*") needs
// the model that names the modules, which only tp.compress(spec, model=...)
// has, so the key refuses selectors that are not class names. ',' ends the
// value (Note [Configuration grammar]), which is why rules are joined by ';'.

#include <string>
#include <string_view>

namespace tp {

/// Checks spec by Note [Compress key grammar]. Returns "" when it is valid,
/// else what is wrong, naming the offending rule or method (the caller adds
/// the source and what is accepted). Pure, thread-safe.
std::string compress_spec_problem(std::string_view spec);

/// spec as the configuration stores it: trimmed, and "" for none (off).
/// Requires: compress_spec_problem(spec) is "". Pure.
std::string normalize_compress_spec(std::string_view spec);

}  // namespace tp
