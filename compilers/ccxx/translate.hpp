// The ccxx translator's interface: CC++-style source in, C++17 on libccxx out.
#ifndef CCXX_TRANSLATE_HPP
#define CCXX_TRANSLATE_HPP

#include <string>

namespace ccxx {

// Translates `source` (read from `filename`, named in #line directives and
// errors). Returns true and writes the C++17 text to `out`; or returns false
// and writes "FILE:LINE: error: MESSAGE" lines to `errors`.
bool translate(const std::string &source, const std::string &filename,
               std::string &out, std::string &errors);

} // namespace ccxx

#endif // CCXX_TRANSLATE_HPP
