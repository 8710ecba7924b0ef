#pragma once
// generator.hpp under its earlier name, kept so existing code compiles.
#include <statickv/reference/generator.hpp>
