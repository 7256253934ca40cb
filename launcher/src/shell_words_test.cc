// Tests for splitting --mpi-args and quoting printed commands.
#include "shell_words.h"

#include <catch2/catch.hpp>

namespace accord::launcher {
namespace {

using Words = std::vector<std::string>;

Words MustSplit(const std::string& text) {
  Result<Words> words = SplitShellWords(text);
  INFO("SplitShellWords(" << text << ") failed: " << words.status());
  REQUIRE(words.ok());
  return *words;
}

TEST_CASE("SplitShellWords splits on whitespace and honours quotes") {
  CHECK(MustSplit("") == Words{});
  CHECK(MustSplit("  --bind-to   none ") == Words{"--bind-to", "none"});
  CHECK(MustSplit("--mca plm_rsh_args '-p 2222'") == Words{"--mca", "plm_rsh_args", "-p 2222"});
  CHECK(MustSplit("\"a b\" c") == Words{"a b", "c"});
  CHECK(MustSplit("\"say \\\"hi\\\" \\$HOME \\n\"") == Words{"say \"hi\" $HOME \\n"});
  CHECK(MustSplit("a\\ b") == Words{"a b"});
  CHECK(MustSplit("'' x") == Words{"", "x"});
  CHECK(MustSplit("pre'fix'\"ed\"") == Words{"prefixed"});
  CHECK(MustSplit("'it'\\''s'") == Words{"it's"});
}

TEST_CASE("SplitShellWords refuses unterminated quotes and a trailing backslash") {
  Result<Words> single = SplitShellWords("--mca x 'oops");
  REQUIRE_FALSE(single.ok());
  CHECK(single.status().message() == "a ' quote is not closed");
  Result<Words> dbl = SplitShellWords("\"oops");
  REQUIRE_FALSE(dbl.ok());
  CHECK(dbl.status().message() == "a \" quote is not closed");
  Result<Words> backslash = SplitShellWords("x \\");
  REQUIRE_FALSE(backslash.ok());
  CHECK(backslash.status().message() == "a backslash ends the text");
}

TEST_CASE("QuoteShellWord leaves safe words alone and single-quotes the rest") {
  CHECK(QuoteShellWord("/usr/bin/mpirun") == "/usr/bin/mpirun");
  CHECK(QuoteShellWord("ACCORD_FUSION_THRESHOLD=33554432") == "ACCORD_FUSION_THRESHOLD=33554432");
  CHECK(QuoteShellWord("host1:4,host2:4") == "host1:4,host2:4");
  CHECK(QuoteShellWord("a b") == "'a b'");
  CHECK(QuoteShellWord("it's") == "'it'\\''s'");
  CHECK(QuoteShellWord("") == "''");
  CHECK(QuoteShellWord("$HOME") == "'$HOME'");
  CHECK(QuoteShellWord("a*") == "'a*'");
}

TEST_CASE("Joined words split back into the same words") {
  Words words = {"mpirun", "-x", "MSG=hello world", "it's", "", "$X", "tab\there", "back\\slash", "\"q\""};
  CHECK(MustSplit(JoinShellWords(words)) == words);
  CHECK(JoinShellWords({"a", "b c"}) == "a 'b c'");
}

}  // namespace
}  // namespace accord::launcher
