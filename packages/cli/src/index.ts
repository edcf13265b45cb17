export { runCli } from "./cli";
export { CliError } from "./errors";
export { ExitCode, processIo, type CliIo } from "./io";
export { formatInspect, inspectJson } from "./format";
