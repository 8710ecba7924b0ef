#pragma once
// Umbrella header: everything a CPU-only or CUDA user needs.

#include <statickv/attention.hpp>
#include <statickv/buckets.hpp>
#include <statickv/cache.hpp>
#include <statickv/config.hpp>
#include <statickv/graph_runner.hpp>
#include <statickv/kernel_switches.hpp>
#include <statickv/layers.hpp>
#include <statickv/mask.hpp>
#include <statickv/parallel.hpp>
#include <statickv/rotary.hpp>
#include <statickv/row_state.hpp>
#include <statickv/sharding.hpp>
#include <statickv/staging.hpp>
#include <statickv/step.hpp>
#include <statickv/varlen.hpp>
#include <statickv/version.hpp>
