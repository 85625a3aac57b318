// PyTorch's names for kiln settings, in one table: the C++ API (kiln::backends::set_text / get_text),
// the C API (kiln_settings_set, kiln_global_setting_*), the CLI (--set NAME=VALUE, kiln compare and
// kiln serve's settings) and Python (kiln.backends.mha, rnn, opt_einsum, winograd.algorithm and
// quantized.engine) all read it. An alias names one setting and, where its values are named
// otherwise, maps them.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace kiln {

struct AliasValue {
  std::string_view alias;    // as the alias says it: "onednn"
  std::string_view setting;  // as the setting takes it: "onednn,native"
};

struct SettingAlias {
  std::string_view name;               // "mkldnn.enabled"
  std::string_view setting;            // the settings table's row: "onednn_enabled"
  std::string_view mirrors;            // the PyTorch control it stands for
  std::span<const AliasValue> values;  // empty: the setting's own values
};

inline constexpr AliasValue kQuantizedEngines[] = {
    {"default", "default"}, {"native", "native"}, {"onednn", "onednn,native"}};

inline constexpr SettingAlias kSettingAliases[] = {
    {"mkldnn.enabled", "onednn_enabled", "torch.backends.mkldnn.enabled", {}},
    {"nnpack.enabled", "winograd_enabled", "torch.backends.nnpack.enabled (Winograd convolutions)", {}},
    {"winograd.algorithm", "conv_algorithm", "which 3x3 convolutions Winograd takes", {}},
    {"mha.fastpath_enabled", "mha_fastpath", "torch.backends.mha.get/set_fastpath_enabled", {}},
    {"rnn.fastpath_enabled", "rnn_fastpath", "torch.backends.cudnn's RNN switch, on CPU", {}},
    {"opt_einsum.enabled", "einsum_optimize", "torch.backends.opt_einsum.enabled", {}},
    {"opt_einsum.strategy", "einsum_strategy", "torch.backends.opt_einsum.strategy", {}},
    {"quantized.engine", "prefer_quantized", "torch.backends.quantized.engine", kQuantizedEngines},
    {"deterministic_algorithms", "deterministic", "torch.use_deterministic_algorithms", {}},
};

// The alias named `name`, or null.
const SettingAlias* find_alias(std::string_view name);
// Every alias's name, for messages.
std::string alias_names();
// An alias's value as its setting takes it; throws invalid_argument naming the alias's values when
// it maps them and `text` is not one.
std::string_view setting_text_of(const SettingAlias& alias, std::string_view text);
// A setting's value text as the alias says it (the setting's own text where the alias has no name
// for it).
std::string alias_text_of(const SettingAlias& alias, const std::string& setting_text);

}  // namespace kiln
