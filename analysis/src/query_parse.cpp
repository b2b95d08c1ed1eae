// Recursive-descent parser of the query language (docs/query.md, "Grammar").
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>

#include "csp/analysis/query.hpp"

namespace csp::analysis {

QueryError::QueryError(std::size_t column, const std::string& message)
    : std::runtime_error("column " + std::to_string(column) + ": " + message), column_(column), message_(message) {}

const char* toString(Measure m) {
  switch (m) {
    case Measure::Duration:
      return "Duration";
    case Measure::MaxPar:
      return "MaxPar";
    case Measure::Area:
      return "Area";
  }
  return "?";
}

const char* toString(Attribute a) { return a == Attribute::WhichThreads ? "WhichThreads" : "WhatRegions"; }

std::string listItem(const std::string& name) {
  const bool plain = !name.empty() && std::none_of(name.begin(), name.end(), [](char c) {
    return std::isspace(static_cast<unsigned char>(c)) || c == '"' || c == '\\' || c == ',' || c == '(' || c == ')';
  });
  if (plain) return name;
  std::string q = "\"";
  for (char c : name) {
    if (c == '"' || c == '\\') q += '\\';
    q += c;
  }
  return q + "\"";
}

std::vector<int> Query::freeVariables() const {
  std::vector<int> out;
  for (std::size_t i = 0; i < variables.size(); ++i)
    if (variables[i].free) out.push_back(static_cast<int>(i));
  return out;
}

namespace {

struct Token {
  enum class Kind { Name, Number, String, Sym, End } kind = Kind::End;
  std::string text;     // Name, String: the text; Sym: canonical spelling; Number: the digits as written
  double number = 0;    // Number: the value as a real (scaled to ns when a unit was given)
  bool integer = true;  // Number: written without '.' (with a unit: a whole number of ns)
  bool unit = false;
  // Number: the exact value, when it is a whole number that fits 64 bits (scaled to ns with a
  // unit); never through a double, so that 2^53 + 1 and thread numbers near 2^64 stay exact.
  std::optional<std::uint64_t> exact;
  std::size_t column = 0;
};

// The exact value of a string of decimal digits, if it fits 64 bits.
std::optional<std::uint64_t> parseDigits(std::string_view digits) {
  std::uint64_t v = 0;
  if (digits.empty()) return std::nullopt;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return v;
}

// Deepest nesting of parentheses, measure calls, '-', 'not' and quantifiers (and operators in a
// row) that a query may have; deeper queries are refused instead of exhausting the stack.
constexpr std::size_t kMaxNesting = 256;
// Quantifiers nested in one another: each multiplies the work per frame by its domain (the
// active threads, or all region names) unless its body does not use its variable.
constexpr std::size_t kMaxQuantifierNesting = 16;

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Splits the text into tokens; columns count characters (UTF-8 code points), 1-based.
std::vector<Token> lex(const std::string& text) {
  std::vector<Token> out;
  std::size_t i = 0, column = 1;
  auto cpLen = [&](std::size_t at) -> std::size_t {
    const auto c = static_cast<unsigned char>(text[at]);
    return c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  };
  auto push = [&](Token::Kind k, std::string t, std::size_t col) {
    Token tok;
    tok.kind = k;
    tok.text = std::move(t);
    tok.column = col;
    out.push_back(std::move(tok));
  };
  static const std::map<std::string, std::string> unicode = {
      {"\u2200", "forall"}, {"\u2203", "exists"}, {"\u2227", "and"}, {"\u2228", "or"},
      {"\u00ac", "not"},    {"\u2260", "!="},     {"\u2208", "in"},  {"\u2209", "notin"},
      {"\u2264", "<="},     {"\u2265", ">="},     {"\u221e", "inf"}, {"\u2016", "or"}};
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const std::size_t col = column;
    if (std::isspace(c)) {
      ++i;
      ++column;
      continue;
    }
    if (c >= 0x80) {
      const std::size_t n = cpLen(i);
      const std::string cp = text.substr(i, n);
      // Subscript digits (the k of an exact quantifier, as in the thesis): a number.
      if (n == 3 && cp[0] == '\xe2' && cp[1] == '\x82' && static_cast<unsigned char>(cp[2]) >= 0x80 &&
          static_cast<unsigned char>(cp[2]) <= 0x89) {
        std::string digits;
        while (i + 2 < text.size() && text.compare(i, 2, "\xe2\x82") == 0 &&
               static_cast<unsigned char>(text[i + 2]) >= 0x80 && static_cast<unsigned char>(text[i + 2]) <= 0x89) {
          digits.push_back(static_cast<char>('0' + (static_cast<unsigned char>(text[i + 2]) - 0x80)));
          i += 3;
          ++column;
        }
        Token tok;
        tok.kind = Token::Kind::Number;
        tok.exact = parseDigits(digits);
        if (!tok.exact) throw QueryError(col, "the number " + digits + " does not fit 64 bits");
        tok.number = static_cast<double>(*tok.exact);
        tok.column = col;
        tok.text = digits;
        out.push_back(tok);
        continue;
      }
      const auto it = unicode.find(cp);
      if (it == unicode.end()) throw QueryError(col, "unexpected character '" + cp + "'");
      push(it->second == "forall" || it->second == "exists" ? Token::Kind::Name : Token::Kind::Sym, it->second, col);
      if (it->second == "and" || it->second == "or" || it->second == "not" || it->second == "in" ||
          it->second == "notin" || it->second == "inf")
        out.back().kind = Token::Kind::Name;
      i += n;
      ++column;
      // ∃_k: the underscore introduces the count.
      if (it->second == "exists" && i + 1 < text.size() && text[i] == '_' &&
          std::isdigit(static_cast<unsigned char>(text[i + 1]))) {
        ++i;
        ++column;
      }
      continue;
    }
    if (std::isdigit(c) || (c == '.' && i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i + 1])))) {
      std::size_t j = i;
      std::size_t dots = 0;
      while (j < text.size() && (std::isdigit(static_cast<unsigned char>(text[j])) || text[j] == '.')) {
        if (text[j] == '.') ++dots;
        ++j;
      }
      Token tok;
      tok.kind = Token::Kind::Number;
      tok.text = text.substr(i, j - i);
      tok.column = col;
      tok.integer = dots == 0;
      if (dots > 1) throw QueryError(col, "malformed number '" + tok.text + "'");
      // Whole numbers exactly (a thread number, a dynamic id, a count); reals through a double.
      if (tok.integer) tok.exact = parseDigits(tok.text);
      tok.number = std::strtod(tok.text.c_str(), nullptr);
      // A unit of time right after the number.
      std::size_t k = j;
      while (k < text.size() &&
             (std::isalpha(static_cast<unsigned char>(text[k])) || text.compare(k, 2, "\xc2\xb5") == 0))
        k += text.compare(k, 2, "\xc2\xb5") == 0 ? 2 : 1;
      if (k > j) {
        const std::string u = text.substr(j, k - j);
        const std::map<std::string, std::uint64_t> scale = {
            {"ns", 1}, {"us", 1000}, {"\xc2\xb5s", 1000}, {"ms", 1000000}, {"s", 1000000000}};
        const auto s = scale.find(u);
        if (s == scale.end()) throw QueryError(col + (j - i), "unknown unit '" + u + "' (ns, us, ms, s)");
        tok.number *= static_cast<double>(s->second);
        tok.unit = true;
        if (tok.exact) {
          if (*tok.exact > UINT64_MAX / s->second)
            tok.exact.reset();
          else
            *tok.exact *= s->second;
        } else if (!tok.integer && std::floor(tok.number) == tok.number && tok.number < 0x1p64) {
          tok.exact = static_cast<std::uint64_t>(tok.number);  // 1.5us: 1500 ns
        }
        tok.integer = tok.exact.has_value();
        column += (k - j) - (u == "\xc2\xb5s" ? 1 : 0);
        j = k;
      }
      column += j - i;
      i = j;
      out.push_back(tok);
      continue;
    }
    if (std::isalpha(c) || c == '_') {
      std::size_t j = i;
      while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_' ||
                                 text[j] == '-' || text[j] == '.' || text[j] == '\''))
        ++j;
      // A trailing '-' or '.' belongs to what follows (e.g. "t-1" is not a thing; "a-" is odd).
      while (j > i + 1 && (text[j - 1] == '-' || text[j - 1] == '.')) --j;
      push(Token::Kind::Name, text.substr(i, j - i), col);
      column += j - i;
      i = j;
      continue;
    }
    if (c == '"') {
      // A quoted name; \" and \\ stand for '"' and '\'. Any other bytes are kept as they are
      // (names need not be UTF-8); `at` is the column of the next character.
      std::size_t j = i + 1, at = col + 1;
      std::string s;
      while (j < text.size() && text[j] != '"') {
        if (text[j] == '\\') {
          if (j + 1 < text.size() && (text[j + 1] == '"' || text[j + 1] == '\\')) {
            s.push_back(text[j + 1]);
            j += 2;
            at += 2;
            continue;
          }
          throw QueryError(at, "unknown escape in a quoted name: write \\\" for '\"' and \\\\ for '\\'");
        }
        if ((static_cast<unsigned char>(text[j]) & 0xC0) != 0x80) ++at;  // not a UTF-8 continuation byte
        s.push_back(text[j++]);
      }
      if (j >= text.size()) throw QueryError(col, "unterminated string");
      push(Token::Kind::String, s, col);
      column = at + 1;
      i = j + 1;
      continue;
    }
    static const char* two[] = {"!=", "<=", ">=", "&&", "||", "==", "<>"};
    bool matched = false;
    for (const char* t : two) {
      if (text.compare(i, 2, t) == 0) {
        std::string s = t;
        if (s == "&&") s = "and";
        if (s == "||") s = "or";
        if (s == "==") s = "=";
        if (s == "<>") s = "!=";
        push(s == "and" || s == "or" ? Token::Kind::Name : Token::Kind::Sym, s, col);
        i += 2;
        column += 2;
        matched = true;
        break;
      }
    }
    if (matched) continue;
    if (std::string("()[]{},:;=+-*/@#<>!").find(static_cast<char>(c)) != std::string::npos) {
      push(c == '!' ? Token::Kind::Name : Token::Kind::Sym, c == '!' ? "not" : std::string(1, static_cast<char>(c)),
           col);
      ++i;
      ++column;
      continue;
    }
    throw QueryError(col, std::string("unexpected character '") + static_cast<char>(c) + "'");
  }
  Token end;
  end.kind = Token::Kind::End;
  end.column = column;
  out.push_back(end);
  return out;
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, Query& q, const std::map<std::string, Range>& classes)
      : t_(tokens), q_(q), classes_(classes) {}

  std::size_t pos = 0;

  const Token& peek(std::size_t ahead = 0) const { return t_[std::min(pos + ahead, t_.size() - 1)]; }
  bool isSym(const char* s, std::size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::Sym && peek(ahead).text == s;
  }
  bool isWord(const char* w, std::size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::Name && lower(peek(ahead).text) == w;
  }
  [[noreturn]] void fail(const std::string& what, std::size_t ahead = 0) const {
    const Token& t = peek(ahead);
    throw QueryError(
        t.column, what + (t.kind == Token::Kind::End ? " at the end of the query" : ", found '" + describe(t) + "'"));
  }
  static std::string describe(const Token& t) {
    if (t.kind != Token::Kind::String) return t.text;
    std::string q = "\"";
    for (char c : t.text) {
      if (c == '"' || c == '\\') q += '\\';
      q += c;
    }
    return q + "\"";
  }

  // Entering a parenthesis, a measure call, '-', 'not' or a quantifier: refused beyond
  // kMaxNesting levels, before the recursion could exhaust the stack.
  class Nest {
   public:
    Nest(Parser& p, std::size_t column) : p_(p) {
      if (p_.depth_ + 1 > kMaxNesting) throw nestingError(column);
      ++p_.depth_;
    }
    ~Nest() { --p_.depth_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    Parser& p_;
  };
  static QueryError nestingError(std::size_t column) {
    return QueryError(column,
                      "the query nests more than " + std::to_string(kMaxNesting) +
                          " levels deep (parentheses, measures, '-', 'not', quantifiers and operators in a row)");
  }
  // A left-nested chain of arithmetic operators is as deep as it is long: counted like nesting.
  void checkHeight(std::size_t height, std::size_t column) const {
    if (depth_ + height > kMaxNesting) throw nestingError(column);
  }

  // The exact value of a whole number without unit at the current token.
  std::uint64_t wholeNumber(const std::string& what) {
    const Token& t = peek();
    if (t.kind != Token::Kind::Number || !t.integer || t.unit) fail(what);
    if (!t.exact) throw tooLarge(t);
    ++pos;
    return *t.exact;
  }
  static QueryError tooLarge(const Token& t) {
    return QueryError(t.column, "the number " + t.text + " does not fit 64 bits (at most 18446744073709551615)");
  }
  void expectSym(const char* s) {
    if (!isSym(s)) fail(std::string("expected '") + s + "'");
    ++pos;
  }

  // --- expressions --------------------------------------------------------------------------
  // Each of expr, term, unary and primary leaves the height of the tree it built in height_.
  std::unique_ptr<Expr> expr() {
    auto e = term();
    std::size_t h = height_;
    while (isSym("+") || isSym("-")) {
      const bool add = isSym("+");
      const auto col = peek().column;
      ++pos;
      auto n = std::make_unique<Expr>();
      n->kind = add ? Expr::Kind::Add : Expr::Kind::Sub;
      n->a = std::move(e);
      n->b = term();
      h = std::max(h, height_) + 1;
      checkHeight(h, col);
      e = std::move(n);
    }
    height_ = h;
    return e;
  }
  std::unique_ptr<Expr> term() {
    auto e = unary();
    std::size_t h = height_;
    while (isSym("*") || isSym("/")) {
      const bool mul = isSym("*");
      const auto col = peek().column;
      ++pos;
      auto n = std::make_unique<Expr>();
      n->kind = mul ? Expr::Kind::Mul : Expr::Kind::Div;
      n->a = std::move(e);
      n->b = unary();
      h = std::max(h, height_) + 1;
      checkHeight(h, col);
      e = std::move(n);
    }
    height_ = h;
    return e;
  }
  std::unique_ptr<Expr> unary() {
    if (isSym("-")) {
      Nest nest(*this, peek().column);
      ++pos;
      auto n = std::make_unique<Expr>();
      n->kind = Expr::Kind::Neg;
      n->a = unary();
      ++height_;
      return n;
    }
    return primary();
  }
  std::optional<Measure> measureWord(std::size_t ahead = 0) const {
    if (peek(ahead).kind != Token::Kind::Name) return std::nullopt;
    const auto w = lower(peek(ahead).text);
    if (w == "duration") return Measure::Duration;
    if (w == "maxpar") return Measure::MaxPar;
    if (w == "area") return Measure::Area;
    return std::nullopt;
  }
  std::optional<Attribute> attributeWord(std::size_t ahead = 0) const {
    if (peek(ahead).kind != Token::Kind::Name) return std::nullopt;
    const auto w = lower(peek(ahead).text);
    if (w == "whichthreads") return Attribute::WhichThreads;
    if (w == "whatregions") return Attribute::WhatRegions;
    return std::nullopt;
  }
  std::unique_ptr<Expr> primary() {
    if (peek().kind == Token::Kind::Number) {
      if (peek().unit) fail("a unit of time belongs in an interval");
      auto n = std::make_unique<Expr>();
      n->number = peek().number;
      if (peek().integer) n->integer = peek().exact;
      ++pos;
      height_ = 1;
      return n;
    }
    if (isSym("(")) {
      Nest nest(*this, peek().column);
      ++pos;
      auto e = expr();
      expectSym(")");
      return e;
    }
    if (auto m = measureWord()) {
      ++pos;
      auto n = std::make_unique<Expr>();
      n->kind = Expr::Kind::Measure;
      n->measure = *m;
      n->call = call();
      height_ = 1;
      return n;
    }
    if (isWord("count")) {
      ++pos;
      expectSym("(");
      auto a = attributeWord();
      if (!a) fail("expected WhichThreads or WhatRegions inside Count");
      ++pos;
      auto n = std::make_unique<Expr>();
      n->kind = Expr::Kind::Count;
      n->attribute = *a;
      n->call = call();
      expectSym(")");
      height_ = 1;
      return n;
    }
    if (attributeWord())
      fail(peek().text + " is a set: use Count(" + peek().text + "(...)) in arithmetic, or ask it alone");
    fail("expected a number, a measure (Duration, MaxPar, Area) or Count(...)");
  }

  // '(' frame query ')' [interval]; also Duration(t, r) for Duration((t, r)).
  int call() {
    Nest nest(*this, peek().column);
    expectSym("(");
    FrameQuery fq;
    if (startsBarePredicate()) {
      fq.formula = predicateBody(peek().column);
    } else {
      fq.formula = formula();
    }
    expectSym(")");
    fq.interval = interval();
    q_.calls.push_back(std::move(fq));
    return static_cast<int>(q_.calls.size() - 1);
  }

  bool startsBarePredicate() const {
    const auto k = peek().kind;
    if (k != Token::Kind::Name && k != Token::Kind::Number && k != Token::Kind::String) return false;
    if (k == Token::Kind::Name && (quantifierWord() || isWord("not"))) return false;
    return isSym(",", 1);
  }

  std::optional<Interval> interval() {
    if (!(isSym("@") || isWord("during"))) return std::nullopt;
    ++pos;
    if (!(isSym("[") || isSym("("))) fail("expected '[' or '(' to start the interval");
    const auto col = peek().column;
    ++pos;
    Interval iv;
    iv.beginNs = timeValue(false);
    expectSym(",");
    iv.endNs = timeValue(true);
    if (!(isSym("]") || isSym(")"))) fail("expected ']' or ')' to end the interval");
    ++pos;
    if (iv.endNs < iv.beginNs) throw QueryError(col, "the interval ends before it begins");
    return iv;
  }
  std::uint64_t timeValue(bool allowInf) {
    if (isWord("inf")) {
      if (!allowInf) fail("an interval cannot begin at infinity");
      ++pos;
      return UINT64_MAX;
    }
    const Token& t = peek();
    if (t.kind != Token::Kind::Number) fail("expected a time (e.g. 0, 1.5s, 200ms, 30us, 1000ns)");
    ++pos;
    // Whole nanoseconds exactly; fractions of a nanosecond (1.5ns, 0.0000001s) rounded.
    if (t.exact) return *t.exact;
    if (t.number >= 0x1p64)
      throw QueryError(t.column, "the time " + t.text + (t.unit ? " (with its unit)" : "") +
                                     " is beyond 2^64 - 1 ns (584 years): use inf for an open end");
    return static_cast<std::uint64_t>(std::round(t.number));  // below 2^64: doubles there are whole
  }

  // --- frame queries ------------------------------------------------------------------------
  // A chain of 'or's (of 'and's) is built as a balanced tree: both are associative, with the
  // same order of evaluation and the same pruned frames, and a long chain stays shallow.
  std::unique_ptr<Formula> formula() {
    std::vector<std::unique_ptr<Formula>> parts;
    std::vector<std::size_t> columns;
    parts.push_back(conjunction());
    while (isWord("or")) {
      columns.push_back(peek().column);
      ++pos;
      parts.push_back(conjunction());
    }
    return balanced(parts, columns, 0, parts.size(), Formula::Kind::Or);
  }
  std::unique_ptr<Formula> conjunction() {
    std::vector<std::unique_ptr<Formula>> parts;
    std::vector<std::size_t> columns;
    parts.push_back(negation());
    while (isWord("and")) {
      columns.push_back(peek().column);
      ++pos;
      parts.push_back(negation());
    }
    return balanced(parts, columns, 0, parts.size(), Formula::Kind::And);
  }
  // parts[lo, hi) joined by `kind`; columns[i] is the operator between parts[i] and parts[i + 1].
  static std::unique_ptr<Formula> balanced(std::vector<std::unique_ptr<Formula>>& parts,
                                           const std::vector<std::size_t>& columns, std::size_t lo, std::size_t hi,
                                           Formula::Kind kind) {
    if (hi - lo == 1) return std::move(parts[lo]);
    const std::size_t mid = lo + (hi - lo) / 2;
    auto n = std::make_unique<Formula>();
    n->kind = kind;
    n->column = columns[mid - 1];
    n->a = balanced(parts, columns, lo, mid, kind);
    n->b = balanced(parts, columns, mid, hi, kind);
    return n;
  }
  std::unique_ptr<Formula> negation() {
    if (isWord("not")) {
      const auto col = peek().column;
      Nest nest(*this, col);
      ++pos;
      auto n = std::make_unique<Formula>();
      n->kind = Formula::Kind::Not;
      n->column = col;
      n->a = negation();
      return n;
    }
    if (quantifierWord()) return quantified();
    if (isSym("(")) {
      if (startsBarePredicate(1)) {
        const auto col = peek().column;
        ++pos;
        auto p = predicateBody(col);
        expectSym(")");
        return p;
      }
      Nest nest(*this, peek().column);
      ++pos;
      auto f = formula();
      expectSym(")");
      return f;
    }
    fail("expected a predicate (thread, region), a quantifier (forall, exists, existsK), 'not' or '('");
  }
  bool startsBarePredicate(std::size_t ahead) const {
    const auto k = peek(ahead).kind;
    if (k != Token::Kind::Name && k != Token::Kind::Number && k != Token::Kind::String) return false;
    return isSym(",", ahead + 1);
  }

  // forall / exists / exists2 / exists 2 / ∃₂ / ∃_2
  std::optional<std::pair<Formula::Kind, std::optional<std::uint64_t>>> quantifierWord() const {
    if (peek().kind != Token::Kind::Name) return std::nullopt;
    const auto w = lower(peek().text);
    if (w == "forall") return std::make_pair(Formula::Kind::ForAll, std::optional<std::uint64_t>());
    if (w == "exists") return std::make_pair(Formula::Kind::Exists, std::optional<std::uint64_t>());
    if (w.size() > 6 && w.compare(0, 6, "exists") == 0 &&
        std::all_of(w.begin() + 6, w.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
      const auto k = parseDigits(std::string_view(w).substr(6));
      if (!k)
        throw QueryError(peek().column, "the count " + w.substr(6) + " of '" + peek().text +
                                            "' does not fit 64 bits (at most 18446744073709551615)");
      return std::make_pair(Formula::Kind::ExistsExactly, std::optional<std::uint64_t>(*k));
    }
    return std::nullopt;
  }

  std::unique_ptr<Formula> quantified() {
    auto [kind, k] = *quantifierWord();
    auto n = std::make_unique<Formula>();
    n->column = peek().column;
    Nest nest(*this, n->column);
    if (quantifierDepth_ + 1 > kMaxQuantifierNesting)
      throw QueryError(n->column,
                       "quantifiers nest more than " + std::to_string(kMaxQuantifierNesting) +
                           " deep (each one multiplies the work per frame by the threads or regions it ranges over)");
    ++quantifierDepth_;
    ++pos;
    if (kind == Formula::Kind::Exists && peek().kind == Token::Kind::Number) {
      kind = Formula::Kind::ExistsExactly;
      k = wholeNumber("the count of an exact quantifier is a whole number");
    }
    n->kind = kind;
    n->k = k.value_or(0);
    if (peek().kind != Token::Kind::Name || reserved(peek().text)) fail("expected the name of the quantified variable");
    const std::string name = peek().text;
    const auto varColumn = peek().column;
    // Rebinding a variable inside its own scope would hide the outer one: refused.
    for (const auto& [bound, var] : scope_)
      if (bound == name)
        throw QueryError(varColumn, "variable '" + name + "' is already bound at column " +
                                        std::to_string(q_.variables[static_cast<std::size_t>(var)].column) +
                                        ": give this quantifier's variable another name");
    ++pos;
    Variable v;
    v.name = name;
    v.column = varColumn;
    q_.variables.push_back(v);
    n->var = static_cast<int>(q_.variables.size() - 1);
    typed_.push_back(false);
    // Constraints: (= | != | in | not in) values [(and | or) NAME constraint ...]
    std::vector<std::pair<std::size_t, std::string>> pendingNames;  // (constraint, value index) resolved after the body
    bool first = true;
    while (!isSym(":")) {
      Constraint c;
      if (!first) {
        if (isWord("and"))
          c.join = Constraint::Join::And;
        else if (isWord("or"))
          c.join = Constraint::Join::Or;
        else
          fail("expected ':' after the quantified variable and its constraints");
        ++pos;
        if (peek().kind != Token::Kind::Name || peek().text != name)
          fail("a constraint must be on the quantified variable '" + name + "'");
        ++pos;
      }
      first = false;
      c.var = n->var;
      if (isSym("="))
        c.op = Constraint::Op::Equal;
      else if (isSym("!="))
        c.op = Constraint::Op::NotEqual;
      else if (isWord("in"))
        c.op = Constraint::Op::In;
      else if (isWord("notin"))
        c.op = Constraint::Op::NotIn;
      else if (isWord("not") && isWord("in", 1)) {
        c.op = Constraint::Op::NotIn;
        ++pos;
      } else
        fail("expected ':' or a constraint (= value, != value, in {values}) after '" + name + "'");
      ++pos;
      if (c.op == Constraint::Op::In || c.op == Constraint::Op::NotIn) {
        expectSym("{");
        if (!isSym("}")) {
          c.values.push_back(constraintValue());
          while (isSym(",")) {
            ++pos;
            c.values.push_back(constraintValue());
          }
        }
        expectSym("}");
      } else {
        c.values.push_back(constraintValue());
      }
      n->constraints.push_back(std::move(c));
    }
    ++pos;  // ':'
    scope_.push_back({name, n->var});
    n->a = formula();
    scope_.pop_back();
    --quantifierDepth_;
    if (!typed_[static_cast<std::size_t>(n->var)]) setType(n->var, VarType::Thread, varColumn);
    // Names among constraint values: a variable (bound outside, or free) or a region name.
    for (auto& c : n->constraints)
      for (auto& t : c.values) resolveConstraintTerm(t, q_.variables[static_cast<std::size_t>(n->var)].type);
    return n;
  }

  Term constraintValue() {
    Term t;
    t.column = peek().column;
    if (peek().kind == Token::Kind::Number) {
      t.kind = Term::Kind::Number;
      t.number = wholeNumber("expected a thread number or a name");
      return t;
    }
    if (peek().kind == Token::Kind::Name || peek().kind == Token::Kind::String) {
      const bool quoted = peek().kind == Token::Kind::String;
      t.kind = Term::Kind::Name;
      t.name = peek().text;
      ++pos;
      if (!quoted)
        if (auto v = lookup(t.name)) {
          t.kind = Term::Kind::Var;
          t.var = *v;
        }
      if (quoted) t.number = 1;  // marks a quoted name: never a variable
      dynamicSuffix(t);
      return t;
    }
    fail("expected a value");
  }

  void resolveConstraintTerm(Term& t, VarType type) {
    if (t.kind == Term::Kind::Var) {
      checkType(t.var, type, t.column);
      return;
    }
    if (t.kind != Term::Kind::Name) return;
    if (type == VarType::Thread) {
      if (t.number == 1) throw QueryError(t.column, "a thread is a number or a variable, not \"" + t.name + "\"");
      t.kind = Term::Kind::Var;
      t.var = freeVar(t.name, VarType::Thread, t.column);
    }
    t.number = 0;
  }

  void dynamicSuffix(Term& t) {
    if (!isSym("#")) return;
    ++pos;
    t.dynamicId = wholeNumber("expected a dynamic id after '#'");
  }

  // thread ',' region [',' filter], the parentheses around it already handled by the caller.
  std::unique_ptr<Formula> predicateBody(std::size_t column) {
    auto p = std::make_unique<Formula>();
    p->kind = Formula::Kind::Predicate;
    p->column = column;
    // Thread
    p->thread.column = peek().column;
    if (peek().kind == Token::Kind::Number) {
      p->thread.kind = Term::Kind::Number;
      p->thread.number = wholeNumber("a thread is a whole number or a variable");
    } else if (peek().kind == Token::Kind::Name && !reserved(peek().text)) {
      p->thread.kind = Term::Kind::Var;
      const std::string name = peek().text;
      if (auto v = lookup(name)) {
        checkType(*v, VarType::Thread, peek().column);
        p->thread.var = *v;
      } else {
        p->thread.var = freeVar(name, VarType::Thread, peek().column);
      }
      ++pos;
    } else {
      fail("expected a thread (a number or a variable)");
    }
    expectSym(",");
    // Region
    p->region.column = peek().column;
    if (peek().kind == Token::Kind::Number) {
      p->region.kind = Term::Kind::Number;
      p->region.number = wholeNumber("a region is a name, a whole number or a variable");
    } else if (peek().kind == Token::Kind::String) {
      p->region.kind = Term::Kind::Name;
      p->region.name = peek().text;
      ++pos;
    } else if (peek().kind == Token::Kind::Name && !reserved(peek().text)) {
      const std::string name = peek().text;
      if (auto v = lookup(name)) {
        checkType(*v, VarType::Region, peek().column);
        p->region.kind = Term::Kind::Var;
        p->region.var = *v;
      } else {
        p->region.kind = Term::Kind::Name;
        p->region.name = name;
      }
      ++pos;
    } else {
      fail("expected a region (a name, a number or a variable)");
    }
    dynamicSuffix(p->region);
    if (isSym(",")) {
      ++pos;
      p->filter = filter();
    }
    return p;
  }

  // attr in RANGE | attr (< | <= | > | >= | = | !=) N | CLASS
  Range filter() {
    if (peek().kind == Token::Kind::Name && !isWord("attr")) {
      const auto it = classes_.find(peek().text);
      if (it == classes_.end())
        fail("expected 'attr in (lo, hi]', 'attr >= N' or a class defined with 'class NAME = ...;'");
      ++pos;
      return it->second;
    }
    return rangeSpec(true);
  }

  Range rangeSpec(bool needAttr) {
    if (isWord("attr")) {
      ++pos;
    } else if (needAttr) {
      fail("expected 'attr'");
    } else if (isSym("[") || isSym("(")) {
      return range();
    }
    if (isWord("in")) {
      ++pos;
      return range();
    }
    Range r;
    const std::string op = peek().kind == Token::Kind::Sym ? peek().text : "";
    if (op != "<" && op != "<=" && op != ">" && op != ">=" && op != "=")
      fail("expected 'in', '<', '<=', '>', '>=' or '='");
    ++pos;
    const std::int64_t v = integer();
    if (op == "<") {
      r.hasHi = true;
      r.hi = v == INT64_MIN ? v : v - 1;
      if (v == INT64_MIN) {
        r.hasLo = true;
        r.lo = 0;
        r.hi = -1;
      }
    }
    if (op == "<=") {
      r.hasHi = true;
      r.hi = v;
    }
    if (op == ">") {
      r.hasLo = true;
      r.lo = v == INT64_MAX ? v : v + 1;
      if (v == INT64_MAX) {
        r.hasHi = true;
        r.hi = v - 1;
      }
    }
    if (op == ">=") {
      r.hasLo = true;
      r.lo = v;
    }
    if (op == "=") {
      r.hasLo = r.hasHi = true;
      r.lo = r.hi = v;
    }
    return r;
  }

  Range range() {
    Range r;
    const bool loOpen = isSym("(");
    if (!loOpen && !isSym("[")) fail("expected '[' or '(' to start a range");
    const auto col = peek().column;
    ++pos;
    std::optional<std::int64_t> writtenLo;
    if (isSym("-") && isWord("inf", 1)) {
      pos += 2;
    } else if (isWord("inf")) {
      fail("a range cannot begin at +inf");
    } else {
      r.hasLo = true;
      r.lo = integer();
      writtenLo = r.lo;
      if (loOpen) {
        if (r.lo == INT64_MAX) {
          r.hasHi = true;
          r.hi = r.lo - 1;
        } else
          ++r.lo;
      }
    }
    expectSym(",");
    bool hiInf = false;
    if (isWord("inf")) {
      ++pos;
      hiInf = true;
    } else if (isSym("+") && isWord("inf", 1)) {
      pos += 2;
      hiInf = true;
    }
    std::int64_t hi = 0;
    if (!hiInf) hi = integer();
    const bool hiOpen = isSym(")") || isSym("[");
    if (!hiOpen && !isSym("]")) fail("expected ']' or ')' to end the range");
    ++pos;
    // Like an interval of time that ends before it begins (a range that holds no integer
    // because of its open ends, such as (5, 6), is not reversed and matches nothing).
    if (writtenLo && !hiInf && hi < *writtenLo) throw QueryError(col, "the range ends before it begins");
    if (!hiInf) {
      if (hiOpen && hi == INT64_MIN) {
        r.hasLo = true;
        r.lo = 0;
        r.hasHi = true;
        r.hi = -1;
      } else if (!r.hasHi) {
        r.hasHi = true;
        r.hi = hiOpen ? hi - 1 : hi;
      }
    }
    return r;
  }

  std::int64_t integer() {
    bool neg = false;
    if (isSym("-")) {
      neg = true;
      ++pos;
    }
    const Token& t = peek();
    if (t.kind != Token::Kind::Number || !t.integer || t.unit) fail("expected a whole number");
    ++pos;
    const std::uint64_t limit = neg ? 9223372036854775808ull : static_cast<std::uint64_t>(INT64_MAX);
    if (!t.exact || *t.exact > limit)
      throw QueryError(t.column,
                       "the attribute value " + std::string(neg ? "-" : "") + t.text +
                           " does not fit a signed 64-bit integer (-9223372036854775808 to 9223372036854775807)");
    const std::uint64_t u = *t.exact;
    if (neg) return u == 9223372036854775808ull ? INT64_MIN : -static_cast<std::int64_t>(u);
    return static_cast<std::int64_t>(u);
  }

  static bool reserved(const std::string& word) {
    static const char* words[] = {"forall", "exists", "and", "or", "not", "in", "notin", "inf", "during", "attr"};
    const auto w = lower(word);
    for (const char* r : words)
      if (w == r) return true;
    return w.size() > 6 && w.compare(0, 6, "exists") == 0 &&
           std::all_of(w.begin() + 6, w.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  }

  std::optional<int> lookup(const std::string& name) const {
    for (auto it = scope_.rbegin(); it != scope_.rend(); ++it)
      if (it->first == name) return it->second;
    for (std::size_t i = 0; i < q_.variables.size(); ++i)
      if (q_.variables[i].free && q_.variables[i].name == name) return static_cast<int>(i);
    return std::nullopt;
  }
  int freeVar(const std::string& name, VarType type, std::size_t column) {
    if (auto v = lookup(name)) {
      checkType(*v, type, column);
      return *v;
    }
    Variable v;
    v.name = name;
    v.type = type;
    v.free = true;
    v.column = column;
    q_.variables.push_back(v);
    typed_.push_back(true);
    return static_cast<int>(q_.variables.size() - 1);
  }
  void setType(int var, VarType type, std::size_t) {
    q_.variables[static_cast<std::size_t>(var)].type = type;
    typed_[static_cast<std::size_t>(var)] = true;
  }
  void checkType(int var, VarType type, std::size_t column) {
    auto& v = q_.variables[static_cast<std::size_t>(var)];
    if (!typed_[static_cast<std::size_t>(var)]) {
      setType(var, type, column);
      return;
    }
    if (v.type != type)
      throw QueryError(column, "'" + v.name + "' is used as a " + (v.type == VarType::Thread ? "thread" : "region") +
                                   " and as a " + (type == VarType::Thread ? "thread" : "region"));
  }

  const std::vector<Token>& t_;
  Query& q_;
  const std::map<std::string, Range>& classes_;
  std::vector<std::pair<std::string, int>> scope_;
  std::vector<bool> typed_;
  std::size_t depth_ = 0;            // nesting (Nest) around the current token
  std::size_t quantifierDepth_ = 0;  // quantifiers around the current token
  std::size_t height_ = 0;           // of the expression just parsed (expr, term, unary, primary)
};

}  // namespace

Query parseQuery(const std::string& text) {
  const auto tokens = lex(text);
  // Class definitions: class NAME = RANGE ;
  std::map<std::string, Range> classes;
  std::size_t start = 0;
  {
    Query scratch;
    Parser p(tokens, scratch, classes);
    while (p.isWord("class")) {
      ++p.pos;
      if (p.peek().kind != Token::Kind::Name || Parser::reserved(p.peek().text)) p.fail("expected the class name");
      const std::string name = p.peek().text;
      ++p.pos;
      p.expectSym("=");
      const Range r = p.rangeSpec(false);
      p.expectSym(";");
      classes[name] = r;
    }
    start = p.pos;
  }
  if (tokens[start].kind == Token::Kind::End) throw QueryError(tokens[start].column, "the query is empty");

  // A measure expression, an attribute, or a bare frame query (the pruned frames). A leading '('
  // may open either an expression or a frame query: try the expression first and keep the error
  // of the attempt that got further.
  auto asValue = [&](Query& q) {
    Parser p(tokens, q, classes);
    p.pos = start;
    if (auto a = p.attributeWord()) {
      ++p.pos;
      q.kind = Query::Kind::Attribute;
      q.attribute = *a;
      p.call();
    } else {
      q.kind = Query::Kind::Value;
      q.expr = p.expr();
    }
    if (p.peek().kind != Token::Kind::End) p.fail("expected the end of the query or an operator");
  };
  auto asFrames = [&](Query& q) {
    Parser p(tokens, q, classes);
    p.pos = start;
    q.kind = Query::Kind::Frames;
    FrameQuery fq;
    fq.formula = p.formula();
    fq.interval = p.interval();
    q.calls.push_back(std::move(fq));
    if (p.peek().kind != Token::Kind::End)
      p.fail("expected the end of the query, 'and', 'or' or an interval '@ [a, b)'");
  };
  Query value;
  value.text = text;
  try {
    asValue(value);
    return value;
  } catch (const QueryError& e1) {
    Query frames;
    frames.text = text;
    try {
      asFrames(frames);
      return frames;
    } catch (const QueryError& e2) {
      throw e2.column() > e1.column() ? e2 : e1;
    }
  }
}

}  // namespace csp::analysis
