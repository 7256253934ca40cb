#include "shell_words.h"

#include <cctype>

namespace accord::launcher {

Result<std::vector<std::string>> SplitShellWords(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;  // a word has started (it may be empty: '')
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
      ++i;
    } else if (c == '\'') {
      size_t close = text.find('\'', i + 1);
      if (close == std::string_view::npos) {
        return Status::InvalidArgument("a ' quote is not closed");
      }
      word.append(text.substr(i + 1, close - i - 1));
      in_word = true;
      i = close + 1;
    } else if (c == '"') {
      ++i;
      for (;;) {
        if (i >= text.size()) return Status::InvalidArgument("a \" quote is not closed");
        char d = text[i];
        if (d == '"') break;
        if (d == '\\' && i + 1 < text.size() &&
            (text[i + 1] == '"' || text[i + 1] == '\\' || text[i + 1] == '$' || text[i + 1] == '`')) {
          word.push_back(text[i + 1]);
          i += 2;
        } else {
          word.push_back(d);
          ++i;
        }
      }
      in_word = true;
      ++i;
    } else if (c == '\\') {
      if (i + 1 >= text.size()) return Status::InvalidArgument("a backslash ends the text");
      word.push_back(text[i + 1]);
      in_word = true;
      i += 2;
    } else {
      word.push_back(c);
      in_word = true;
      ++i;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

std::string QuoteShellWord(std::string_view word) {
  bool safe = !word.empty();
  for (char c : word) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '/' || c == ':' ||
          c == ',' || c == '=' || c == '+' || c == '@' || c == '%')) {
      safe = false;
      break;
    }
  }
  if (safe) return std::string(word);
  std::string quoted = "'";
  for (char c : word) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted.push_back(c);
    }
  }
  quoted += "'";
  return quoted;
}

std::string JoinShellWords(const std::vector<std::string>& words) {
  std::string line;
  for (const std::string& word : words) {
    if (!line.empty()) line.push_back(' ');
    line += QuoteShellWord(word);
  }
  return line;
}

}  // namespace accord::launcher
