// main() of accord_launcher_unit_tests (the launcher's tests beside its code).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
