// main() of accord_unit_tests (the single-process Catch2 tests beside the code).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
