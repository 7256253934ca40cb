// Shell-style words: splitting the text of --mpi-args into arguments, and
// quoting arguments so that a printed command can be pasted into a shell.
//
// Pure functions; any thread may call them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "accord/status.h"

namespace accord::launcher {

// Splits `text` into words the way a POSIX shell would, without expanding
// anything: words are separated by whitespace; '...' keeps everything
// literally; "..." keeps everything but lets a backslash escape " \ $ and `;
// outside quotes a backslash escapes the next character. An unterminated quote
// or a trailing backslash is an InvalidArgument error.
Result<std::vector<std::string>> SplitShellWords(std::string_view text);

// `word` as a shell would need it: unchanged when it holds only characters
// that are safe unquoted, otherwise in single quotes.
std::string QuoteShellWord(std::string_view word);

// The words quoted and joined with single spaces.
std::string JoinShellWords(const std::vector<std::string>& words);

}  // namespace accord::launcher
