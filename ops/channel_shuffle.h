// kiln's ChannelShuffle: ShuffleNet's exchange of channels between groups. Exporters write it as
// Reshape [N, C, H, W] -> [N, g, C/g, H, W], Transpose (0, 2, 1, 3, 4), Reshape back to
// [N, C, H, W]; graph/passes/channel_shuffle_fusion.cpp plans those three nodes as this one step, so
// a channels-last value is shuffled where it is (a permutation of each pixel's channels) instead of
// being converted to plain layout for the Transpose and back. kiln's own op: no schema row, so no
// model can name it.
//
// Input x [N, C, H, W]; attribute groups g (C divisible by g). Output channel a * g + b is input
// channel b * (C / g) + a.
#pragma once

#include <string_view>

namespace kiln {

inline constexpr std::string_view kChannelShuffleOp = "ChannelShuffle";

}  // namespace kiln
