// The ccxx translator: a small tokenizer and five rewriting passes that turn
// the CC++ keywords into C++17 calls of libccxx, keeping every line where it
// was.
//
// Only the tokens of a construct change; whitespace, comments and
// preprocessor lines are carried through, so the output keeps the input's
// line structure and one #line directive at the top maps every line back.
#include "translate.hpp"

#include <cctype>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <vector>

namespace ccxx {
namespace {

enum kind { IDENT, NUMBER, STRING, PUNCT, END };

// A token: `pre` is the trivia before it (whitespace, comments, directives);
// `orig` is what the user wrote (what passes match on); `before`, `text`
// and `after` are what is emitted (passes replace text, wrap with
// before/after, so several constructs can share a token).
struct token {
  std::string pre, orig, text, before, after;
  int kind;
  int line;
};

using tokens = std::vector<token>;
static const size_t npos = static_cast<size_t>(-1);

tokens lex(const std::string &s) {
  tokens out;
  size_t i = 0, n = s.size();
  int line = 1;
  bool line_start = true; // only trivia since the last newline
  std::string pre;
  auto take = [&](size_t len) {
    std::string t = s.substr(i, len);
    for (char c : t)
      if (c == '\n')
        line++;
    i += len;
    return t;
  };
  while (i < n) {
    char c = s[i];
    if (c == '\n' || isspace(static_cast<unsigned char>(c))) {
      if (c == '\n')
        line_start = true;
      pre += take(1);
      continue;
    }
    if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      size_t e = s.find('\n', i);
      pre += take((e == std::string::npos ? n : e) - i);
      continue;
    }
    if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      size_t e = s.find("*/", i + 2);
      pre += take((e == std::string::npos ? n : e + 2) - i);
      continue;
    }
    if (c == '#' && line_start) {
      size_t e = i;
      while (e < n && s[e] != '\n')
        e += (s[e] == '\\' && e + 1 < n) ? 2 : 1;
      pre += take(e - i);
      continue;
    }
    line_start = false;
    token t;
    t.pre = pre;
    pre.clear();
    t.line = line;
    if (isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = i;
      while (e < n &&
             (isalnum(static_cast<unsigned char>(s[e])) || s[e] == '_'))
        e++;
      std::string id = s.substr(i, e - i);
      if (e < n && s[e] == '"' && !id.empty() && id.back() == 'R') {
        // A raw string literal: R"delim( ... )delim".
        size_t p = s.find('(', e);
        std::string delim =
            p == std::string::npos ? "" : s.substr(e + 1, p - e - 1);
        size_t close = p == std::string::npos ? std::string::npos
                                              : s.find(")" + delim + "\"", p);
        size_t end = close == std::string::npos ? n : close + delim.size() + 2;
        t.kind = STRING;
        t.orig = take(end - i);
      } else {
        t.kind = IDENT;
        t.orig = take(e - i);
      }
    } else if (isdigit(static_cast<unsigned char>(c)) ||
               (c == '.' && i + 1 < n &&
                isdigit(static_cast<unsigned char>(s[i + 1])))) {
      size_t e = i;
      while (e < n && (isalnum(static_cast<unsigned char>(s[e])) ||
                       s[e] == '.' || s[e] == '\'' ||
                       ((s[e] == '+' || s[e] == '-') &&
                        strchr("eEpP", s[e - 1]) != nullptr)))
        e++;
      t.kind = NUMBER;
      t.orig = take(e - i);
    } else if (c == '"' || c == '\'') {
      size_t e = i + 1;
      while (e < n && s[e] != c && s[e] != '\n')
        e += s[e] == '\\' ? 2 : 1;
      t.kind = STRING;
      t.orig = take((e < n ? e + 1 : n) - i);
    } else {
      static const char *const multi[] = {
          "...", "::", "->", "++", "--", "<<", "&&", "||", "==", "!=",
          "<=",  ">=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^="};
      size_t len = 1;
      for (const char *m : multi)
        if (s.compare(i, strlen(m), m) == 0) {
          len = strlen(m);
          break;
        }
      t.kind = PUNCT;
      t.orig = take(len);
    }
    t.text = t.orig;
    out.push_back(t);
  }
  token end;
  end.pre = pre;
  end.kind = END;
  end.line = line;
  out.push_back(end);
  return out;
}

// A public member function of a global class, as the stub generator and the
// parameter check see it (token indices).
struct member_fn {
  size_t name, start, lp, rp;
  // Each parameter: [begin, end) without its default, the name's index (npos
  // when unnamed) and the default's '=' (npos when none).
  struct param {
    size_t begin, end, name, eq;
  };
  std::vector<param> params;
  bool stub = true; // goes into the class's stub
  bool is_const = false, is_noexcept = false;
  size_t ret_begin = npos, ret_end = npos; // the written return type
};

// A global class: its name and body; `local` when declared inside a
// function (no stub: C++ forbids member templates in local classes).
struct global_class {
  std::string name;
  size_t lb, rb;
  bool is_struct;
  bool local;
};

class translator {
public:
  translator(tokens t, std::string file) : t_(std::move(t)), file_(file) {}
  bool run(std::string &out, std::string &errors);

private:
  tokens t_;
  std::string file_;
  std::ostringstream err_;
  int nerr_ = 0;
  std::set<std::string> classes_;              // global classes
  std::vector<global_class> bodies_;           // their bodies
  std::map<std::string, std::string> globals_; // T *global name -> T
  std::map<size_t, std::string> decl_types_;   // '*global' token -> T
  int main_line_ = 0;
  int serial_ = 0;

  void error(size_t i, const std::string &msg) {
    err_ << file_ << ":" << t_[i].line << ": error: " << msg << "\n";
    nerr_++;
  }
  bool is(size_t i, const char *s) const {
    return i < t_.size() && t_[i].kind != END && t_[i].orig == s;
  }
  // The index of the bracket that closes the one at `i`, or npos.
  size_t match(size_t i) const;
  // The last token of the statement starting at `i` (its ';' or '}'), or npos.
  size_t statement_end(size_t i) const;
  // A keyword used as a statement (not a member, qualified name or variable).
  bool at_statement_start(size_t i) const;
  // Whether the token at `i` is inside a function body (also inside a class
  // declared in one).
  bool in_function(size_t i) const;
  std::string emitted(size_t from, size_t to) const;

  void pass_classes();
  std::vector<member_fn> public_functions(const global_class &c) const;
  void check_remote_params(const global_class &c);
  void pass_stubs();
  void pass_sync();
  void pass_global_ptrs();
  std::string declaration_type(size_t comma) const;
  void check_declarators(size_t name);
  void pass_objects();
  size_t body_end(size_t b) const;
  void check_escapes(size_t from, size_t to, bool in_loop, bool in_switch,
                     const std::string &where);
  void pass_statements();
};

size_t translator::match(size_t i) const {
  const std::string open = t_[i].orig;
  const char *close = open == "(" ? ")" : open == "[" ? "]" : "}";
  int depth = 0;
  for (size_t j = i; j < t_.size() && t_[j].kind != END; j++) {
    if (t_[j].kind != PUNCT)
      continue;
    const std::string &o = t_[j].orig;
    if (o == "(" || o == "[" || o == "{")
      depth++;
    else if (o == ")" || o == "]" || o == "}") {
      if (--depth == 0)
        return o == close ? j : npos;
    }
  }
  return npos;
}

size_t translator::statement_end(size_t i) const {
  if (is(i, "{"))
    return match(i);
  for (size_t j = i; j < t_.size() && t_[j].kind != END; j++) {
    if (t_[j].kind != PUNCT)
      continue;
    const std::string &o = t_[j].orig;
    if (o == ";")
      return j;
    if (o == "(" || o == "[" || o == "{") {
      j = match(j);
      if (j == npos)
        return npos;
    } else if (o == ")" || o == "]" || o == "}") {
      return npos;
    }
  }
  return npos;
}

bool translator::at_statement_start(size_t i) const {
  if (i == 0)
    return true;
  const std::string &p = t_[i - 1].orig;
  return p == ";" || p == "{" || p == "}" || p == ")" || p == "else" ||
         p == "do" || p == ":";
}

bool translator::in_function(size_t i) const {
  // The innermost '{' around i.
  size_t lb = npos;
  for (size_t j = i, depth = 0; j-- > 0;) {
    if (is(j, "}")) {
      depth++;
    } else if (is(j, "{")) {
      if (depth == 0) {
        lb = j;
        break;
      }
      depth--;
    }
  }
  if (lb == npos)
    return false;
  // What the brace opens: a namespace (or extern "C"), a class, or a
  // function's (or a statement's) block. The declaration before it runs
  // back to ';', '{' or '}', its parentheses and template parameters
  // skipped.
  for (size_t j = lb; j-- > 0 && !is(j, ";") && !is(j, "{") && !is(j, "}");) {
    if (is(j, ")") || is(j, ">")) {
      const char *open = is(j, ")") ? "(" : "<";
      const char *close = t_[j].orig.c_str();
      int depth = 0;
      for (;; j--) {
        depth += is(j, close) - is(j, open);
        if (depth == 0 || j == 0)
          break;
      }
      continue;
    }
    if (is(j, "namespace") || is(j, "extern"))
      return false;
    if (is(j, "class") || is(j, "struct") || is(j, "union"))
      return in_function(j);
  }
  return true;
}

std::string translator::emitted(size_t from, size_t to) const {
  std::string s;
  for (size_t j = from; j < to; j++) {
    if (j > from && !t_[j].pre.empty())
      s += " ";
    s += t_[j].before + t_[j].text + t_[j].after;
  }
  return s;
}

// `global class C { ... };` and `atomic` member functions.
void translator::pass_classes() {
  for (size_t i = 0; i < t_.size() && t_[i].kind != END; i++) {
    if (t_[i].kind != IDENT)
      continue;
    if (t_[i].orig == "global" && (is(i + 1, "class") || is(i + 1, "struct"))) {
      t_[i].text = "";
      if (t_[i + 2].kind != IDENT) {
        error(i, "'global class' needs a class name");
        continue;
      }
      const std::string name = t_[i + 2].orig;
      if (is(i - 1, ">")) {
        size_t lt = i - 1;
        for (int depth = 0; lt > 0; lt--) {
          depth += is(lt, ">") - is(lt, "<");
          if (depth == 0)
            break;
        }
        if (lt > 0 && is(lt - 1, "template")) {
          error(i, "global class '" + name +
                       "' is a template: templates of global classes are not "
                       "supported");
          continue;
        }
      }
      size_t j = i + 3;
      while (t_[j].kind != END && !is(j, "{") && !is(j, ";"))
        j++;
      if (!is(j, "{")) {
        error(i, "global class '" + name +
                     "' has no body (a processor object type must be "
                     "defined where it is declared global)");
        continue;
      }
      classes_.insert(name);
      size_t rb = match(j);
      if (rb != npos) {
        bodies_.push_back(
            global_class{name, j, rb, is(i + 1, "struct"), in_function(i)});
        check_remote_params(bodies_.back());
      }
    } else if (t_[i].orig == "atomic" && i > 0 && !is(i - 1, "::") &&
               !is(i - 1, ".") && !is(i - 1, "->")) {
      t_[i].text = "";
      size_t j = i + 1, paren = npos;
      while (t_[j].kind != END && !is(j, "{") && !is(j, ";")) {
        if (is(j, "(") && paren == npos)
          paren = j;
        if (is(j, "(") || is(j, "[")) {
          size_t m = match(j);
          if (m == npos)
            break;
          j = m;
        }
        j++;
      }
      if (paren == npos || paren == i + 1) {
        error(i, "'atomic' applies to a member function");
      } else if (!is(j, "{")) {
        error(i, "atomic function '" + t_[paren - 1].orig +
                     "' has no body here (define atomic functions inside "
                     "their class)");
      } else {
        t_[j].after += " ccxx::atomic_guard ccxx_atomic_(this);";
      }
    }
  }
}

// The public member functions of a global class, which can be called
// remotely: constructors too (their parameters are checked), but not static
// members, friends or operators. A function's qualifiers, its written return
// type and each parameter's name and default are recorded for its stub.
std::vector<member_fn>
translator::public_functions(const global_class &c) const {
  static const std::set<std::string> specifiers = {
      "virtual", "inline", "constexpr", "explicit", "atomic"};
  std::vector<member_fn> out;
  bool open = c.is_struct;
  for (size_t i = c.lb + 1; i < c.rb; i++) {
    if (is(i, "{")) { // a nested body: not a member declaration
      size_t m = match(i);
      if (m == npos)
        return out;
      i = m;
      continue;
    }
    if (t_[i].kind == IDENT && is(i + 1, ":") &&
        (t_[i].orig == "public" || t_[i].orig == "private" ||
         t_[i].orig == "protected")) {
      open = t_[i].orig == "public";
      continue;
    }
    if (!open || t_[i].kind != IDENT || !is(i + 1, "(") ||
        t_[i].orig == "operator" || (i > 0 && is(i - 1, "operator")))
      continue;
    // A declaration starts after ';', '}', '{' or an access label.
    size_t k = i;
    bool skip = false, is_template = false;
    while (k > c.lb + 1 && !is(k - 1, ";") && !is(k - 1, "}") &&
           !is(k - 1, "{") && !is(k - 1, ":")) {
      k--;
      if (t_[k].orig == "friend" || t_[k].orig == "static" ||
          t_[k].orig == "using" || t_[k].orig == "typedef")
        skip = true;
      if (t_[k].orig == "template")
        is_template = true;
      if (is(k, "=") || is(k, "("))
        break; // an initialiser or a call, not a member function
    }
    if (skip || is(k, "=") || is(k, "("))
      continue;
    size_t rp = match(i + 1);
    if (rp == npos)
      return out;
    member_fn f;
    f.name = i;
    f.start = k;
    f.lp = i + 1;
    f.rp = rp;
    f.stub = !is_template && t_[i].orig != c.name && !is(i - 1, "~");
    // The return type: the declaration's tokens before the name, less
    // specifiers and attributes.
    size_t r = k;
    while (r < i && (specifiers.count(t_[r].orig) || is(r, "["))) {
      if (is(r, "[")) {
        size_t m = match(r);
        r = m == npos ? i : m + 1;
      } else {
        r++;
      }
    }
    if (r < i) {
      f.ret_begin = r;
      f.ret_end = i;
    }
    // The parameters.
    size_t start = i + 2;
    if (start == rp || (start + 1 == rp && is(start, "void")))
      start = rp + 1; // no parameters
    for (size_t j = start; j <= rp && start <= rp; j++) {
      if (is(j, "(") || is(j, "[") || is(j, "{")) {
        size_t m = match(j);
        if (m == npos || m > rp)
          break;
        j = m;
        continue;
      }
      if (is(j, "<")) { // skip template arguments
        int depth = 0;
        for (; j < rp; j++) {
          depth += is(j, "<") - is(j, ">");
          if (depth == 0)
            break;
        }
        continue;
      }
      if (!is(j, ",") && j != rp)
        continue;
      member_fn::param p{start, j, npos, npos};
      for (size_t q = start; q < j; q++)
        if (is(q, "=")) {
          p.eq = q;
          p.end = q;
          break;
        }
      // The name: the last identifier, when the tokens before it are a type.
      static const std::set<std::string> not_names = {
          "int",      "char",     "long",     "short", "unsigned", "signed",
          "float",    "double",   "bool",     "void",  "auto",     "const",
          "volatile", "global",   "struct",   "class", "enum",     "typename",
          "wchar_t",  "char16_t", "char32_t", "size_t"};
      size_t last = p.end - 1;
      if (p.end > p.begin + 1 && t_[last].kind == IDENT &&
          not_names.count(t_[last].orig) == 0 && !is(last - 1, "::") &&
          !is(last - 1, "const") && !is(last - 1, "volatile") &&
          !is(last - 1, "struct") && !is(last - 1, "class") &&
          !is(last - 1, "enum") && !is(last - 1, "typename"))
        p.name = last;
      f.params.push_back(p);
      start = j + 1;
    }
    // Qualifiers up to the body, ';', '= ...' or a constructor's
    // initialisers; a trailing return type replaces an 'auto' one.
    size_t q = rp + 1;
    for (; t_[q].kind != END && !is(q, "{") && !is(q, ";") && !is(q, "=") &&
           !is(q, ":");
         q++) {
      if (is(q, "const"))
        f.is_const = true;
      else if (is(q, "noexcept"))
        f.is_noexcept = true;
      else if (is(q, "&") || is(q, "&&") || is(q, "volatile"))
        f.stub = false; // no remote call through a qualified this
      else if (is(q, "(")) {
        size_t m = match(q);
        if (m == npos)
          break;
        q = m;
      } else if (is(q, "->")) {
        f.ret_begin = q + 1;
        size_t e = q + 1;
        while (t_[e].kind != END && !is(e, "{") && !is(e, ";") && !is(e, "=") &&
               !is(e, "override") && !is(e, "final"))
          e++;
        f.ret_end = e;
        q = e - 1;
      }
    }
    if (is(q, "=") && is(q + 1, "delete"))
      f.stub = false;
    out.push_back(f);
    if (is(q, ":")) {
      // A constructor's initialisers: name(args) or name{args}, ...
      q++;
      while (t_[q].kind != END && !is(q, "{")) {
        if (is(q, "(") || is(q, "{") || is(q, "[")) {
          size_t m = match(q);
          if (m == npos)
            return out;
          q = m + 1;
          if (is(q, ","))
            q++;
          else if (!is(q, "{") && !is(q, "..."))
            break;
        } else {
          q++;
        }
      }
    }
    // Continue before the body, which the loop then skips.
    i = q - 1;
  }
  return out;
}

// The public member functions of a global class can be called remotely:
// their parameters may not be local pointers or references (they mean
// nothing in another address space). Named here, where the parameter's name
// is known; libccxx's static_assert catches the rest.
void translator::check_remote_params(const global_class &c) {
  for (const member_fn &f : public_functions(c)) {
    const std::string fn = c.name + "::" + t_[f.name].orig;
    for (const member_fn::param &p : f.params) {
      bool local = false, ref = false;
      for (size_t q = p.begin; q < p.end; q++) {
        if (is(q, "*") && !is(q + 1, "global"))
          local = true;
        if (is(q, "&") || is(q, "&&"))
          ref = true;
      }
      std::string pname = p.name != npos ? t_[p.name].orig : "";
      if (local || ref)
        error(p.begin, "remote method '" + fn + "': parameter '" + pname +
                           "' is a local " + (local ? "pointer" : "reference") +
                           " (pass it by value, or as T *global)");
    }
  }
}

// For each global class, a stub nested in it: `p->f(args)` on a
// ccxx::global_ptr<C> calls f of C::ccxx_stub_ (global_ptr's operator->
// returns one), which has f's signature and makes the remote call. C++ then
// chooses among overloads, applies defaults and finds `p`'s type however it
// was declared. The stub's functions are templates so that only the ones
// called are compiled (a public method returning a reference is fine
// locally). Runs last: parameter types are emitted as translated.
void translator::pass_stubs() {
  for (const global_class &c : bodies_) {
    if (c.local)
      continue;
    std::vector<member_fn> fns = public_functions(c);
    std::map<std::string, int> count;
    for (const member_fn &f : fns)
      if (f.stub)
        count[t_[f.name].orig]++;
    std::string stub = " public: struct ccxx_stub_ { const "
                       "ccxx::global_ptr<" +
                       c.name +
                       "> &ccxx_p_; const ccxx_stub_ *operator->() const { "
                       "return this; }";
    for (const member_fn &f : fns) {
      if (!f.stub)
        continue;
      const std::string name = t_[f.name].orig;
      std::string params, types, args;
      for (size_t n = 0; n < f.params.size(); n++) {
        const member_fn::param &p = f.params[n];
        std::string type =
            p.name == npos ? emitted(p.begin, p.end) : emitted(p.begin, p.name);
        std::string pn = p.name == npos ? "ccxx_a" + std::to_string(n) + "_"
                                        : t_[p.name].orig;
        std::string sep = n > 0 ? ", " : "";
        params += sep + type + " " + pn;
        if (p.eq != npos) {
          size_t e = p.eq + 1;
          size_t stop =
              n + 1 < f.params.size() ? f.params[n + 1].begin - 1 : f.rp;
          params += " = " + emitted(e, stop);
        }
        types += sep + type;
        args += sep + "std::move(" + pn + ")";
      }
      std::string fp = "&" + c.name + "::" + name;
      if (count[name] > 1) {
        std::string ret =
            f.ret_begin == npos ? "" : emitted(f.ret_begin, f.ret_end);
        if (ret.empty() || ret == "auto") {
          error(f.name, "overloaded remote method '" + c.name + "::" + name +
                            "' needs its return type written (not auto)");
          continue;
        }
        fp = "static_cast<" + ret + " (" + c.name + "::*)(" + types + ")" +
             (f.is_const ? " const" : "") + (f.is_noexcept ? " noexcept" : "") +
             ">(" + fp + ")";
      }
      // The result type is written out: a method of C may call its own
      // stub before the stub's bodies are compiled.
      stub += " template <int ccxx_n_ = 0> ccxx::detail::result_t<" + fp +
              "> " + name + "(" + params +
              ") const { return ccxx::detail::stub_call<" + fp +
              ", ccxx_n_>(ccxx_p_" + (args.empty() ? "" : ", ") + args + "); }";
    }
    stub += " };";
    t_[c.rb].before = stub + " " + t_[c.rb].before;
  }
}

// `sync T x` -> `ccxx::sync<T> x`.
void translator::pass_sync() {
  for (size_t i = 0; i < t_.size() && t_[i].kind != END; i++) {
    if (t_[i].kind != IDENT || t_[i].orig != "sync" ||
        (i > 0 && (is(i - 1, "::") || is(i - 1, ".") || is(i - 1, "->"))))
      continue;
    size_t j = i + 1;
    bool bad = false;
    while (t_[j].kind != END) {
      if (is(j, "&") || is(j, "&&")) {
        error(i, "'sync' on a reference: a sync variable holds its own value "
                 "(use 'sync T *global' to share one)");
        bad = true;
        break;
      }
      if (is(j, "*"))
        break;
      if (t_[j].kind == IDENT && j > i + 1 &&
          (is(j + 1, ";") || is(j + 1, "=") || is(j + 1, ",") ||
           is(j + 1, ")") || is(j + 1, "[") || is(j + 1, "{")))
        break;
      if (is(j, "<")) {
        int depth = 0;
        for (; t_[j].kind != END; j++) {
          depth += is(j, "<") - is(j, ">");
          if (depth == 0)
            break;
        }
      } else if (t_[j].kind != IDENT && !is(j, "::")) {
        error(i, "'sync' needs a type and then a name: sync T name;");
        bad = true;
        break;
      }
      j++;
    }
    if (bad)
      continue;
    if (j == i + 1 || t_[j].kind == END) {
      error(i, "'sync' needs a type and then a name: sync T name;");
      continue;
    }
    t_[i].text = "ccxx::sync<";
    t_[j - 1].after = ">" + t_[j - 1].after;
  }
}

// `T *global p` -> `ccxx::global_ptr<T> p`.
void translator::pass_global_ptrs() {
  static const std::set<std::string> stop = {
      "return",  "static",    "inline",  "virtual",  "extern",
      "mutable", "constexpr", "friend",  "typedef",  "explicit",
      "case",    "else",      "do",      "new",      "delete",
      "throw",   "public",    "private", "protected"};
  for (size_t i = 0; i < t_.size() && t_[i].kind != END; i++) {
    if (!(t_[i].kind == IDENT && t_[i].orig == "global"))
      continue;
    if (is(i + 1, "class") || is(i + 1, "struct"))
      continue;
    if (i == 0 || !is(i - 1, "*")) {
      error(i, "'global' belongs after '*' (T *global p) or before 'class'");
      continue;
    }
    size_t star = i - 1, k = star;
    while (k > 0) {
      const token &p = t_[k - 1];
      if (p.kind == IDENT && stop.count(p.orig) == 0) {
        k--;
      } else if (p.orig == "::") {
        k--;
      } else if (p.orig == ">") {
        int depth = 0;
        size_t j = k - 1;
        for (;; j--) {
          depth += is(j, ">") - is(j, "<");
          if (depth == 0 || j == 0)
            break;
        }
        k = j;
      } else {
        break;
      }
    }
    if (k == star && k > 0 && is(k - 1, ",")) {
      // A further declarator (T *global a = x, *global b = y;): the type
      // is the declaration's, already ccxx::global_ptr<T>.
      std::string type = declaration_type(k - 1);
      if (!type.empty()) {
        t_[star].text = "";
        t_[i].text = "";
        decl_types_[i] = type;
        if (t_[i + 1].kind == IDENT && !is(i + 2, "("))
          globals_[t_[i + 1].orig] = type;
        continue;
      }
    }
    if (k == star) {
      error(i, "'*global' needs a pointee type before it (T *global p)");
      continue;
    }
    std::string type = emitted(k, star);
    t_[k].before = "ccxx::global_ptr<" + t_[k].before;
    t_[star].text = ">";
    if (t_[star].pre.find('\n') == std::string::npos)
      t_[star].pre.clear();
    t_[i].text = "";
    decl_types_[i] = type;
    if (t_[i + 1].kind == IDENT && !is(i + 2, "(")) {
      globals_[t_[i + 1].orig] = type;
      check_declarators(i + 1);
    }
  }
}

// The type of the global pointer declared before the ',' at `comma` in the
// same declaration, or "" when none is.
std::string translator::declaration_type(size_t comma) const {
  int depth = 0;
  for (size_t j = comma; j-- > 0;) {
    const std::string &o = t_[j].orig;
    if (t_[j].kind == PUNCT) {
      if (o == ")" || o == "]" || o == "}")
        depth++;
      else if (o == "(" || o == "[" || o == "{") {
        if (--depth < 0)
          return "";
      } else if (depth == 0 && o == ";") {
        return "";
      }
    }
    if (depth == 0) {
      auto d = decl_types_.find(j);
      if (d != decl_types_.end())
        return d->second;
    }
  }
  return "";
}

// In `T *global a, b;` b would be a global pointer too (the declaration's
// type is ccxx::global_ptr<T>): refused, every declarator after a global
// pointer must be one. `name` is the first declarator's name.
void translator::check_declarators(size_t name) {
  for (size_t j = name + 1; t_[j].kind != END; j++) {
    if (is(j, "(") || is(j, "[") || is(j, "{")) {
      j = match(j);
      if (j == npos)
        return;
      continue;
    }
    if (is(j, ";") || is(j, ")") || is(j, "}") || is(j, ">") || is(j, "]"))
      return;
    if (is(j, ",") && !(is(j + 1, "*") && is(j + 2, "global")) &&
        t_[j + 1].kind == IDENT &&
        (is(j + 2, ";") || is(j + 2, ",") || is(j + 2, "=")))
      error(j + 1, "'" + t_[j + 1].orig +
                       "' would be a global pointer too: declare it "
                       "separately, or write *global before it");
  }
}

// `new (where) C(args)`, `delete p`, `p->f(args)` and `p->member`.
void translator::pass_objects() {
  for (size_t i = 0; i < t_.size() && t_[i].kind != END; i++) {
    if (t_[i].kind != IDENT)
      continue;
    const std::string &w = t_[i].orig;
    if (w == "async" && i >= 2 && is(i - 1, "::") && is(i - 2, "ccxx") &&
        is(i + 1, "(")) {
      // ccxx::async(p, &C::f, args...) -> ccxx::async<&C::f>(p, args...):
      // the method is a template argument of the library's async.
      size_t rp = match(i + 1), comma = npos;
      for (size_t j = i + 2; rp != npos && j < rp; j++) {
        if (is(j, "(") || is(j, "[") || is(j, "{")) {
          j = match(j);
          if (j == npos)
            break;
        } else if (is(j, ",")) {
          comma = j;
          break;
        }
      }
      size_t e = comma == npos ? npos : comma + 2;
      while (e != npos && t_[e].kind == IDENT && is(e + 1, "::"))
        e += 2;
      if (e == npos || !is(comma + 1, "&") || t_[e].kind != IDENT ||
          !(is(e + 1, ",") || is(e + 1, ")"))) {
        error(i, "ccxx::async needs the method as its second argument: "
                 "ccxx::async(p, &C::f, args...)");
        continue;
      }
      t_[i].text = "async<" + emitted(comma + 1, e + 1) + ">";
      for (size_t j = comma; j <= e; j++)
        t_[j].text = "";
      continue;
    }
    if (w == "new" && is(i + 1, "(")) {
      size_t rp = match(i + 1);
      if (rp == npos || t_[rp + 1].kind != IDENT ||
          classes_.count(t_[rp + 1].orig) == 0)
        continue; // ordinary placement new
      size_t c = rp + 1;
      if (is(c + 1, "{")) {
        error(i, "'new (where) " + t_[c].orig +
                     "{...}': write the constructor's arguments in "
                     "parentheses, new (where) " +
                     t_[c].orig + "(args)");
        continue;
      }
      t_[i].text = "ccxx::create<" + t_[c].orig + ">";
      t_[c].text = "";
      if (is(c + 1, "(")) {
        size_t end = match(c + 1);
        t_[rp].text = end == c + 2 ? "" : ",";
        t_[c + 1].text = "";
      }
      continue;
    }
    if (w == "delete" && !is(i + 1, "[") &&
        !(i > 0 &&
          (is(i - 1, "=") || is(i - 1, "operator") || is(i - 1, "::")))) {
      // Whatever the operand's type: ccxx::delete_ destroys a global
      // pointer's object and deletes a local pointer's.
      size_t e = statement_end(i + 1);
      if (e == npos || !is(e, ";"))
        continue;
      t_[i].text = "ccxx::delete_(";
      t_[e].before = ")" + t_[e].before;
      continue;
    }
    auto g = globals_.find(w);
    if (g == globals_.end() ||
        (i > 0 && (is(i - 1, ".") || is(i - 1, "->") || is(i - 1, "::"))))
      continue;
    size_t j = i + 1;
    while (is(j, "[")) {
      j = match(j);
      if (j == npos)
        break;
      j++;
    }
    if (j == npos || !is(j, "->") || t_[j + 1].kind != IDENT)
      continue;
    size_t m = j + 1;
    if (is(m + 1, "(") && classes_.count(g->second))
      continue; // the class's stub makes the call (pass_stubs)
    if (is(m + 1, "(")) {
      t_[j].text = ".call<&" + g->second + "::" + t_[m].orig + ">";
      t_[m].text = "";
    } else {
      t_[i].before += "(*";
      t_[j].text = ".member(&" + g->second + "::";
      t_[m].after = ")" + t_[m].after + ")";
    }
  }
}

// The last token of the statement starting at `b` as a loop's body: a
// braced block, a statement, or an if, loop or switch with its own body.
size_t translator::body_end(size_t b) const {
  if (is(b, "{"))
    return match(b);
  if (is(b, "do")) {
    size_t e = body_end(b + 1);
    if (e == npos || !is(e + 1, "while") || !is(e + 2, "("))
      return npos;
    size_t rp = match(e + 2);
    return rp == npos || !is(rp + 1, ";") ? npos : rp + 1;
  }
  if ((is(b, "if") || is(b, "for") || is(b, "while") || is(b, "switch")) &&
      is(b + 1, "(")) {
    size_t rp = match(b + 1);
    size_t e = rp == npos ? npos : body_end(rp + 1);
    if (e != npos && is(b, "if") && is(e + 1, "else"))
      return body_end(e + 2);
    return e;
  }
  return statement_end(b);
}

// A par statement or a parfor body [from, to] becomes a lambda, so a
// `return`, a `goto` to a label outside it, or a `break` or `continue` that
// is not inside a loop (or, for break, a switch) of its own would leave
// that lambda, not the user's function or loop: refused. Lambdas and local
// classes inside it are their own functions and are skipped; nested par and
// parfor statements are checked on their own.
void translator::check_escapes(size_t from, size_t to, bool in_loop,
                               bool in_switch, const std::string &where) {
  auto refuse = [&](size_t i) {
    error(i, "'" + t_[i].orig + "' cannot leave " + where);
  };
  for (size_t i = from; i <= to && i < t_.size() && t_[i].kind != END; i++) {
    const std::string &w = t_[i].orig;
    if (is(i, "[")) {
      size_t rb = match(i);
      if (rb == npos)
        return;
      // A lambda where an operand starts, or where what follows the
      // brackets is a lambda's body, parameters or specifiers (after a
      // cast, `(void)[] { ... }()`).
      size_t after = is(rb + 1, "(") ? match(rb + 1) : rb;
      bool lambda = i == 0 ||
                    (t_[i - 1].kind == PUNCT && !is(i - 1, ")") &&
                     !is(i - 1, "]") && !is(i - 1, "[")) ||
                    is(i - 1, "return") || is(i - 1, "throw") ||
                    is(rb + 1, "{") ||
                    (after != npos && after > rb &&
                     (is(after + 1, "{") || is(after + 1, "mutable") ||
                      is(after + 1, "->") || is(after + 1, "noexcept") ||
                      is(after + 1, "constexpr")));
      if (!lambda || is(i + 1, "[")) {
        i = rb;
        continue;
      }
      // A lambda: its body is the first braced block after the capture.
      size_t j = rb + 1;
      while (j <= to && !is(j, "{") && !is(j, ";")) {
        if (is(j, "(") || is(j, "[")) {
          size_t m = match(j);
          if (m == npos)
            return;
          j = m;
        }
        j++;
      }
      if (is(j, "{")) {
        size_t m = match(j);
        if (m == npos)
          return;
        j = m;
      }
      i = j;
      continue;
    }
    if (t_[i].kind != IDENT ||
        (i > 0 && (is(i - 1, ".") || is(i - 1, "->") || is(i - 1, "::"))))
      continue;
    if (w == "return" || w == "co_return") {
      refuse(i);
    } else if (w == "break" && !in_loop && !in_switch) {
      refuse(i);
    } else if (w == "continue" && !in_loop) {
      refuse(i);
    } else if (w == "goto" && t_[i + 1].kind == IDENT) {
      // Legal when its label is in the same block.
      bool inside = false;
      for (size_t j = from; j < to && !inside; j++)
        inside = t_[j].orig == t_[i + 1].orig && is(j + 1, ":") &&
                 !is(j + 2, ":") && j > 0 &&
                 (is(j - 1, ";") || is(j - 1, "{") || is(j - 1, "}"));
      if (!inside)
        refuse(i);
    } else if ((w == "struct" || w == "class" || w == "union") &&
               !is(i - 1, "enum")) {
      // A local class's body: its member functions are functions.
      size_t j = i + 1;
      while (j <= to && !is(j, "{") && !is(j, ";") && !is(j, "(") &&
             !is(j, ")") && !is(j, ","))
        j++;
      if (is(j, "{")) {
        size_t m = match(j);
        if (m == npos)
          return;
        i = m;
      }
    } else if (w == "do" || ((w == "for" || w == "while" || w == "switch" ||
                              w == "parfor") &&
                             is(i + 1, "("))) {
      size_t b = i + 1;
      if (w != "do") {
        b = match(i + 1);
        if (b == npos)
          return;
        b++;
      }
      size_t e = body_end(b);
      if (e == npos)
        return;
      if (w == "parfor" && at_statement_start(i)) {
        i = e; // checked as a parfor of its own
        continue;
      }
      check_escapes(b, e, in_loop || w != "switch", in_switch || w == "switch",
                    where);
      i = e;
    } else if (w == "par" && is(i + 1, "{") && at_statement_start(i)) {
      size_t m = match(i + 1);
      if (m == npos)
        return;
      i = m; // checked as a par of its own
    }
  }
}

// `par { ... }`, `parfor (...) ...`, `spawn f(...);` and main.
void translator::pass_statements() {
  int depth = 0;
  for (size_t i = 0; i < t_.size() && t_[i].kind != END; i++) {
    const std::string &w = t_[i].orig;
    if (t_[i].kind == PUNCT) {
      depth += (w == "{") - (w == "}");
      continue;
    }
    if (t_[i].kind != IDENT)
      continue;
    if (w == "main" && depth == 0 && is(i + 1, "(") &&
        (i == 0 || !is(i - 1, "::"))) {
      t_[i].text = "ccxx_main_";
      main_line_ = t_[i].line;
      continue;
    }
    if ((w != "par" && w != "parfor" && w != "spawn") || !at_statement_start(i))
      continue;
    if (w == "par") {
      if (!is(i + 1, "{")) {
        error(i, "'par' without a block: write par { statement; ... }");
        continue;
      }
      size_t rb = match(i + 1);
      if (rb == npos) {
        error(i, "'par' block is not closed");
        continue;
      }
      std::vector<std::pair<size_t, size_t>> stmts;
      bool ok = true;
      for (size_t s = i + 2; s < rb;) {
        size_t e = statement_end(s);
        if (e == npos || e >= rb) {
          error(s, "'par' block: expected a statement ending in ';' or a "
                   "braced block");
          ok = false;
          break;
        }
        stmts.push_back({s, e});
        s = e + 1;
      }
      if (!ok)
        continue;
      for (const auto &st : stmts)
        check_escapes(st.first, st.second, false, false,
                      "a 'par' block: each of its statements runs as a "
                      "function of its own, in a thread of its own");
      t_[i].text = "ccxx::par";
      t_[i + 1].text = "(";
      t_[rb].text = ");";
      for (size_t k = 0; k < stmts.size(); k++) {
        t_[stmts[k].first].before += "[&] { ";
        t_[stmts[k].second].after = std::string(" }") +
                                    (k + 1 < stmts.size() ? "," : "") +
                                    t_[stmts[k].second].after;
      }
    } else if (w == "parfor") {
      if (!is(i + 1, "(")) {
        error(i, "'parfor' without a loop header: write parfor (init; cond; "
                 "step) statement");
        continue;
      }
      size_t rp = match(i + 1);
      if (rp == npos) {
        error(i, "'parfor' header is not closed");
        continue;
      }
      std::vector<size_t> semis;
      for (size_t j = i + 2; j < rp; j++) {
        if (is(j, "(") || is(j, "[") || is(j, "{"))
          j = match(j);
        else if (is(j, ";"))
          semis.push_back(j);
      }
      if (semis.size() != 2) {
        error(i, "'parfor' header needs init; condition; step");
        continue;
      }
      size_t var = npos;
      for (size_t j = i + 2; j < semis[0]; j++)
        if ((is(j, "=") || is(j, "{")) && t_[j - 1].kind == IDENT) {
          var = j - 1;
          break;
        }
      if (var == npos) {
        error(i, "'parfor' needs a loop variable set in its header (int i = "
                 "0; ...)");
        continue;
      }
      size_t b = rp + 1, e = statement_end(b);
      if (e == npos) {
        error(b, "'parfor' body: expected a statement or a braced block");
        continue;
      }
      check_escapes(b, e, false, false,
                    "a 'parfor' body: each iteration runs as a function of "
                    "its own");
      std::string g = "ccxx_pf" + std::to_string(serial_++) + "_";
      t_[i].text = "{ ccxx::parfor_group " + g + "; for";
      bool block = is(b, "{");
      t_[b].before +=
          g + ".add([&, " + t_[var].orig + "]() " + (block ? "" : "{ ");
      t_[e].after = std::string(block ? "" : " }") + "); " + g + ".run(); }" +
                    t_[e].after;
    } else { // spawn
      size_t e = statement_end(i + 1);
      bool call = e != npos && is(e, ";") && e >= i + 3 && is(e - 1, ")");
      if (call) {
        // The ')' before ';' must close an argument list that follows a
        // callee, not a parenthesised expression.
        size_t lp = e - 1;
        int d = 0;
        for (;; lp--) {
          d += is(lp, ")") - is(lp, "(");
          if (d == 0 || lp == i + 1)
            break;
        }
        call = d == 0 && lp > i + 1 &&
               (t_[lp - 1].kind == IDENT || is(lp - 1, ">") ||
                is(lp - 1, ")") || is(lp - 1, "]"));
      }
      if (!call) {
        error(i, "'spawn' of a non-call: spawn takes a function call, "
                 "spawn f(args);");
        continue;
      }
      // The arguments are evaluated here, in the spawning thread, and
      // their values passed to the call, which runs in the new thread (on
      // a copy of the callee expression's variables).
      size_t lp = e - 1;
      for (int d = 0;; lp--) {
        d += is(lp, ")") - is(lp, "(");
        if (d == 0)
          break;
      }
      t_[i].text = "ccxx::spawn([=](auto &&...ccxx_a_) mutable {";
      t_[lp].text = "(std::forward<decltype(ccxx_a_)>(ccxx_a_)...); }" +
                    std::string(lp + 1 == e - 1 ? "" : ",");
      t_[e - 1].text = ")";
    }
  }
}

bool translator::run(std::string &out, std::string &errors) {
  pass_classes();
  pass_sync();
  pass_global_ptrs();
  pass_objects();
  pass_statements();
  pass_stubs();
  if (nerr_ > 0) {
    errors = err_.str();
    return false;
  }
  std::string quoted;
  for (char c : file_) {
    if (c == '"' || c == '\\')
      quoted += '\\';
    quoted += c;
  }
  std::ostringstream o;
  o << "// Generated by ccxx from " << file_ << "; edit that file instead.\n"
    << "#include <ccxx/ccxx.hpp>\n"
    << "#line 1 \"" << quoted << "\"\n";
  for (const token &t : t_)
    o << t.pre << t.before << t.text << t.after;
  if (main_line_ > 0)
    o << "\n#line " << main_line_ << " \"" << quoted << "\"\n"
      << "int main(int argc, char **argv) { return ccxx::start(argc, argv, "
         "ccxx_main_); }\n";
  out = o.str();
  return true;
}

} // namespace

bool translate(const std::string &source, const std::string &filename,
               std::string &out, std::string &errors) {
  translator tr(lex(source), filename);
  return tr.run(out, errors);
}

} // namespace ccxx
