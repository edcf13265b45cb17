export { runCli } from "./cli";
export { CliError, type CliErrorCode } from "./errors";
export { ExitCode, processIo, type CliIo } from "./io";
export { formatInspect, inspectJson, type InspectOptions } from "./format";
