#include "csp/metrics/expression.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <limits>

namespace csp::metrics {

namespace {

constexpr double kUndefined = std::numeric_limits<double>::quiet_NaN();
// Bounds the parser's recursion (and so its stack use) on hostile input such as "((((...".
constexpr std::size_t kMaxNesting = 100;
constexpr std::size_t kMaxStack = 256;

bool isNameStart(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
bool isNameChar(char c) { return isNameStart(c) || (c >= '0' && c <= '9') || c == '.'; }
bool isDigit(char c) { return c >= '0' && c <= '9'; }

enum class Token : std::uint8_t {
  End,
  Number,
  Name,
  QuotedName,
  LParen,
  RParen,
  Comma,
  Plus,
  Minus,
  Star,
  Slash,
  Equals
};

const char* describe(Token t) {
  switch (t) {
    case Token::End:
      return "end of expression";
    case Token::Number:
      return "number";
    case Token::Name:
    case Token::QuotedName:
      return "name";
    case Token::LParen:
      return "'('";
    case Token::RParen:
      return "')'";
    case Token::Comma:
      return "','";
    case Token::Plus:
      return "'+'";
    case Token::Minus:
      return "'-'";
    case Token::Star:
      return "'*'";
    case Token::Slash:
      return "'/'";
    case Token::Equals:
      return "'='";
  }
  return "token";
}

}  // namespace

ExpressionError::ExpressionError(std::size_t column, const std::string& message)
    : std::runtime_error("column " + std::to_string(column) + ": " + message), column_(column) {}

class ExpressionParser {
 public:
  explicit ExpressionParser(std::string_view text) : text_(text) { advance(); }

  // Parses `expr` up to the end of the text.
  Expression parseExpression(std::size_t offset) {
    Expression e;
    out_ = &e;
    expr(0);
    expect(Token::End);
    std::string_view body = text_.substr(offset);
    while (!body.empty() && (body.front() == ' ' || body.front() == '\t')) body.remove_prefix(1);
    e.text_ = std::string(body);
    e.source_ = std::string(text_);
    finishStackDepth(e);
    return e;
  }

  Definition parseDefinition() {
    if (token_ != Token::Name && token_ != Token::QuotedName)
      fail(tokenStart_, std::string("expected the derived metric's name, found ") + describe(token_));
    Definition d;
    d.name = std::string(tokenText_);
    advance();
    if (token_ != Token::Equals)
      fail(tokenStart_, std::string("expected '=' after the name, found ") + describe(token_));
    const std::size_t exprStart = tokenEnd_;
    advance();
    d.expression = parseExpression(exprStart);
    return d;
  }

 private:
  [[noreturn]] void fail(std::size_t pos, const std::string& message) const { throw ExpressionError(pos + 1, message); }

  void advance() {
    std::size_t i = tokenEnd_;
    while (i < text_.size() && (text_[i] == ' ' || text_[i] == '\t' || text_[i] == '\n' || text_[i] == '\r')) ++i;
    tokenStart_ = i;
    if (i >= text_.size()) {
      token_ = Token::End;
      tokenEnd_ = i;
      return;
    }
    const char c = text_[i];
    auto single = [&](Token t) {
      token_ = t;
      tokenEnd_ = i + 1;
    };
    switch (c) {
      case '(':
        return single(Token::LParen);
      case ')':
        return single(Token::RParen);
      case ',':
        return single(Token::Comma);
      case '+':
        return single(Token::Plus);
      case '-':
        return single(Token::Minus);
      case '*':
        return single(Token::Star);
      case '/':
        return single(Token::Slash);
      case '=':
        return single(Token::Equals);
      case '`':
      case '{': {
        const char close = c == '`' ? '`' : '}';
        const std::size_t end = text_.find(close, i + 1);
        if (end == std::string_view::npos) fail(i, std::string("unterminated quoted name (missing ") + close + ")");
        if (end == i + 1) fail(i, "empty quoted name");
        token_ = Token::QuotedName;
        tokenText_ = text_.substr(i + 1, end - i - 1);
        tokenEnd_ = end + 1;
        return;
      }
      default:
        break;
    }
    if (isDigit(c) || (c == '.' && i + 1 < text_.size() && isDigit(text_[i + 1]))) {
      std::size_t j = i;
      while (j < text_.size() && isDigit(text_[j])) ++j;
      if (j < text_.size() && text_[j] == '.') {
        ++j;
        while (j < text_.size() && isDigit(text_[j])) ++j;
      }
      if (j < text_.size() && (text_[j] == 'e' || text_[j] == 'E')) {
        std::size_t k = j + 1;
        if (k < text_.size() && (text_[k] == '+' || text_[k] == '-')) ++k;
        if (k >= text_.size() || !isDigit(text_[k])) fail(j, "malformed exponent in number");
        while (k < text_.size() && isDigit(text_[k])) ++k;
        j = k;
      }
      if (j < text_.size() && isNameChar(text_[j])) fail(j, "unexpected character after number");
      const auto res = std::from_chars(text_.data() + i, text_.data() + j, number_);
      if (res.ec != std::errc() || !std::isfinite(number_)) fail(i, "number out of range");
      token_ = Token::Number;
      tokenEnd_ = j;
      return;
    }
    if (isNameStart(c)) {
      std::size_t j = i + 1;
      while (j < text_.size() && isNameChar(text_[j])) ++j;
      token_ = Token::Name;
      tokenText_ = text_.substr(i, j - i);
      tokenEnd_ = j;
      return;
    }
    fail(i, std::string("unexpected character '") + c + "'");
  }

  void expect(Token t) {
    if (token_ == t) return;
    if (t == Token::End) fail(tokenStart_, std::string("expected an operator or the end, found ") + describe(token_));
    fail(tokenStart_, std::string("expected ") + describe(t) + ", found " + describe(token_));
  }

  void emit(Expression::Op op, std::uint32_t index = 0, double constant = 0) {
    out_->code_.push_back({op, index, constant});
  }

  void expr(std::size_t depth) {
    if (depth > kMaxNesting) fail(tokenStart_, "expression nested too deeply");
    term(depth);
    while (token_ == Token::Plus || token_ == Token::Minus) {
      const auto op = token_ == Token::Plus ? Expression::Op::Add : Expression::Op::Subtract;
      advance();
      term(depth);
      emit(op);
    }
  }

  void term(std::size_t depth) {
    unary(depth);
    while (token_ == Token::Star || token_ == Token::Slash) {
      const auto op = token_ == Token::Star ? Expression::Op::Multiply : Expression::Op::Divide;
      advance();
      unary(depth);
      emit(op);
    }
  }

  void unary(std::size_t depth) {
    if (token_ == Token::Minus) {
      if (depth > kMaxNesting) fail(tokenStart_, "expression nested too deeply");
      advance();
      unary(depth + 1);
      emit(Expression::Op::Negate);
      return;
    }
    primary(depth);
  }

  void primary(std::size_t depth) {
    switch (token_) {
      case Token::Number:
        emit(Expression::Op::Constant, 0, number_);
        advance();
        return;
      case Token::LParen:
        advance();
        expr(depth + 1);
        expect(Token::RParen);
        advance();
        return;
      case Token::Name: {
        const std::size_t start = tokenStart_;
        const std::string_view name = tokenText_;
        advance();
        if (token_ == Token::LParen) return call(name, start, depth);
        variable(name, start);
        return;
      }
      case Token::QuotedName:
        variable(tokenText_, tokenStart_);
        advance();
        return;
      default:
        fail(tokenStart_, std::string("expected a number, a name or '(', found ") + describe(token_));
    }
  }

  void call(std::string_view name, std::size_t start, std::size_t depth) {
    struct Function {
      std::string_view name;
      Expression::Op op;
      std::size_t arity;
    };
    static constexpr std::array<Function, 4> kFunctions{{{"min", Expression::Op::Min, 2},
                                                         {"max", Expression::Op::Max, 2},
                                                         {"sqrt", Expression::Op::Sqrt, 1},
                                                         {"log", Expression::Op::Log, 1}}};
    const Function* f = nullptr;
    for (const auto& candidate : kFunctions)
      if (candidate.name == name) f = &candidate;
    if (f == nullptr) fail(start, "unknown function '" + std::string(name) + "' (known: min, max, sqrt, log)");
    advance();  // '('
    std::size_t args = 0;
    while (true) {
      expr(depth + 1);
      ++args;
      if (token_ != Token::Comma) break;
      advance();
    }
    expect(Token::RParen);
    if (args != f->arity)
      fail(start, std::string(name) + " takes " + std::to_string(f->arity) + " argument" + (f->arity == 1 ? "" : "s") +
                      ", given " + std::to_string(args));
    advance();
    emit(f->op);
  }

  void variable(std::string_view name, std::size_t start) {
    std::uint32_t index = 0;
    while (index < out_->names_.size() && out_->names_[index] != name) ++index;
    if (index == out_->names_.size()) {
      out_->names_.emplace_back(name);
      out_->columns_.push_back(start + 1);
    }
    emit(Expression::Op::Variable, index);
  }

  void finishStackDepth(Expression& e) const {
    std::size_t depth = 0;
    for (const auto& ins : e.code_) {
      switch (ins.op) {
        case Expression::Op::Constant:
        case Expression::Op::Variable:
          ++depth;
          break;
        case Expression::Op::Negate:
        case Expression::Op::Sqrt:
        case Expression::Op::Log:
          break;
        default:
          --depth;
          break;
      }
      e.maxStack_ = std::max(e.maxStack_, depth);
    }
    if (e.maxStack_ > kMaxStack) fail(0, "expression too complex");
  }

  std::string_view text_;
  Expression* out_ = nullptr;
  Token token_ = Token::End;
  std::size_t tokenStart_ = 0;
  std::size_t tokenEnd_ = 0;
  std::string_view tokenText_;
  double number_ = 0;
};

Expression Expression::parse(std::string_view text) {
  ExpressionParser parser(text);
  return parser.parseExpression(0);
}

double Expression::evaluate(std::span<const double> values) const {
  if (values.size() != names_.size())
    throw std::invalid_argument("expression: " + std::to_string(names_.size()) + " values expected, got " +
                                std::to_string(values.size()));
  if (code_.empty()) return kUndefined;  // a default-constructed Expression
  std::array<double, kMaxStack> stack;
  std::size_t top = 0;  // number of entries
  for (const auto& ins : code_) {
    switch (ins.op) {
      case Op::Constant:
        stack[top++] = ins.constant;
        continue;
      case Op::Variable:
        stack[top++] = values[ins.index];
        continue;
      case Op::Negate:
        stack[top - 1] = -stack[top - 1];
        continue;
      case Op::Sqrt: {
        const double x = stack[top - 1];
        stack[top - 1] = x < 0 ? kUndefined : std::sqrt(x);
        continue;
      }
      case Op::Log: {
        const double x = stack[top - 1];
        stack[top - 1] = x > 0 ? std::log(x) : kUndefined;
        continue;
      }
      default:
        break;
    }
    const double b = stack[--top];
    double& a = stack[top - 1];
    switch (ins.op) {
      case Op::Add:
        a = a + b;
        break;
      case Op::Subtract:
        a = a - b;
        break;
      case Op::Multiply:
        a = a * b;
        break;
      case Op::Divide:
        a = b == 0 ? kUndefined : a / b;
        break;
      // NaN-propagating, unlike std::min/std::fmin.
      case Op::Min:
        a = std::isnan(a) || std::isnan(b) ? kUndefined : (b < a ? b : a);
        break;
      case Op::Max:
        a = std::isnan(a) || std::isnan(b) ? kUndefined : (b > a ? b : a);
        break;
      default:
        break;
    }
  }
  return stack[0];
}

double Expression::evaluate(const std::function<std::optional<double>(std::string_view)>& lookup) const {
  std::vector<double> values;
  values.reserve(names_.size());
  for (std::size_t i = 0; i < names_.size(); ++i) {
    const auto v = lookup(names_[i]);
    if (!v) throw unknownName(i);
    values.push_back(*v);
  }
  return evaluate(values);
}

ExpressionError Expression::unknownName(std::size_t nameIndex, std::string_view what) const {
  const std::string& name = names_.at(nameIndex);
  const std::size_t column = columns_.at(nameIndex);
  std::string message = "unknown " + std::string(what) + " '" + name + "'";
  // Only a bare name can run into a '-': the column points at its first character.
  const std::size_t after = column - 1 + name.size();
  if (after + 1 < source_.size() && source_.compare(column - 1, name.size(), name) == 0 && source_[after] == '-' &&
      isNameChar(source_[after + 1])) {
    std::size_t end = after + 1;
    while (end < source_.size() && (isNameChar(source_[end]) || source_[end] == '-')) ++end;
    message += " (names containing '-' must be quoted: `" + source_.substr(column - 1, end - column + 1) +
               "`; write a - b with spaces for a subtraction)";
  }
  return ExpressionError(column, message);
}

Definition parseDefinition(std::string_view text) {
  ExpressionParser parser(text);
  return parser.parseDefinition();
}

// ---------------------------------------------------------------------------------------------

PerThreadDerivedMetric PerThreadDerivedMetric::parse(std::string_view definition) {
  PerThreadDerivedMetric m;
  m.definition_ = parseDefinition(definition);
  return m;
}

std::optional<double> PerThreadDerivedMetric::evaluate(std::span<const double> inputValues) const {
  const double v = definition_.expression.evaluate(inputValues);
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

namespace {

// Splits off the last ".component" of `rest` if it satisfies `accept`.
template <typename Accept>
bool splitSuffix(std::string_view& rest, Accept accept) {
  const std::size_t dot = rest.rfind('.');
  if (dot == std::string_view::npos || dot == 0) return false;
  if (!accept(rest.substr(dot + 1))) return false;
  rest = rest.substr(0, dot);
  return true;
}

}  // namespace

SummaryFormula SummaryFormula::parse(std::string_view definition) {
  SummaryFormula f;
  f.definition_ = parseDefinition(definition);
  const Expression& e = f.definition_.expression;
  for (std::size_t i = 0; i < e.names().size(); ++i) {
    std::string_view rest = e.names()[i];
    StatisticRef ref;
    splitSuffix(rest, [&](std::string_view s) {
      for (const auto stat : kStatistics)
        if (s == toString(stat)) {
          ref.statistic = stat;
          return true;
        }
      return false;
    });
    splitSuffix(rest, [&](std::string_view s) {
      if (s == "all")
        ref.population = Population::All;
      else if (s == "present")
        ref.population = Population::Present;
      else
        return false;
      return true;
    });
    ref.metric = std::string(rest);
    f.references_.push_back(std::move(ref));
  }
  return f;
}

double SummaryFormula::evaluate(
    const std::function<std::optional<Statistics>(std::string_view, Population)>& statisticsOf) const {
  std::vector<double> values;
  values.reserve(references_.size());
  for (std::size_t i = 0; i < references_.size(); ++i) {
    const auto& ref = references_[i];
    const auto s = statisticsOf(ref.metric, ref.population);
    if (!s) throw definition_.expression.unknownName(i, "metric '" + ref.metric + "' in");
    values.push_back(valueOf(*s, ref.statistic));
  }
  return evaluate(values);
}

}  // namespace csp::metrics
