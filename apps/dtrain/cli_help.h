// The command line's helpers beyond CLI11's own: validators whose errors say what
// an option expects ("a whole number >= 1, got 'abc'"), the check that catches
// `--set KEY VALUE` written without '=', which subcommand's --help a usage error
// points to, and the --help footers (examples, environment variables).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace dtrain::app {

// A whole number >= min (<= max): "expected a whole number >= 1, got 'abc'".
CLI::Validator whole_at_least(long long min);
CLI::Validator whole_between(long long min, long long max);
// A number (decimals allowed) >= min.
CLI::Validator number_at_least(double min);   // a finite number >= min
CLI::Validator seconds_at_least(double min);  // a duration: min .. 1e7 s (config::kMaxSeconds)

// "" when every --set in argv is KEY=VALUE; else the error for the first that is not.
std::string check_set_arguments(int argc, char** argv);

// "dtrain launch --help": the help of the deepest subcommand the command line named.
std::string help_command(const CLI::App& app);

// What to say for arguments CLI11 could not place (its ExtrasError, after
// app.parse threw): each unknown word or option of the deepest command the line
// named, with the closest command or option ("unknown command 'rnu' for 'dtrain'
// (did you mean 'run'?)"), or the job key a familiar flag sets ("--epochs: the
// epochs are the job's train.epochs: --set train.epochs=N").
std::string unexpected_arguments_text(const CLI::App& app);

// Footers of --help: examples and the environment variables dtrain reads.
std::string run_help_footer();
std::string launch_help_footer();
std::string main_help_footer();

}  // namespace dtrain::app
