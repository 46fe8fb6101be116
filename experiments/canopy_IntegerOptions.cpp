/// \file canopy_IntegerOptions.cpp
/// \brief Integer flags read as given: CLI11 reads "" as 0, saturates a value past 64 bits at the
/// type's maximum and reads "010" as octal and "0x10" as hex, so every integer option of every
/// command is checked as text before it is converted.
#include "canopy_Commands.hpp"

#include <charconv>
#include <cstdint>

namespace canopy::cli
{
namespace
{
/// "" when \p text is a decimal integer that fits 64 bits (signed unless \p is_unsigned), else why not.
std::string integerProblem(std::string const &text, bool is_unsigned)
{
  if (text.empty())
    return "is empty; give an integer";
  char const *b = text.data(), *e = text.data() + text.size();
  char const *digits = b + (text[0] == '-' ? 1 : 0);
  bool const all_digits = digits != e && std::string(digits, e).find_first_not_of("0123456789") == std::string::npos;
  if (!all_digits || (is_unsigned && text[0] == '-'))
    return std::string("must be a ") + (is_unsigned ? "non-negative " : "") + "decimal integer, got '" + text + "'";
  if (e - digits > 1 && *digits == '0')
    return "must be written without leading zeros, got '" + text + "'";
  std::from_chars_result r{};
  if (is_unsigned)
  {
    uint64_t v = 0;
    r = std::from_chars(b, e, v);
  }
  else
  {
    int64_t v = 0;
    r = std::from_chars(b, e, v);
  }
  if (r.ec == std::errc::result_out_of_range)
    return "'" + text + "' does not fit in " + (is_unsigned ? "an unsigned" : "a signed") + " 64-bit integer";
  return "";
}

void checkOptions(CLI::App &app)
{
  for (CLI::Option *opt : app.get_options())
  {
    std::string const type = opt->get_type_name();
    bool const is_unsigned = type.rfind("UINT", 0) == 0;
    if (!is_unsigned && type.rfind("INT", 0) != 0)
      continue;
    opt->check(CLI::Validator([is_unsigned](std::string &text) { return integerProblem(text, is_unsigned); }, ""));
  }
  for (CLI::App *sub : app.get_subcommands({}))
    checkOptions(*sub);
}
} // namespace

void checkIntegersAsGiven(CLI::App &app) { checkOptions(app); }
} // namespace canopy::cli
