// Catch2 main shared by the test executables.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
