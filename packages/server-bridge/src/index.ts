export { BridgeError, type BridgeErrorCode } from "./errors";
export { modelArgs, DEFAULT_NUM_CTX } from "./args";
export { builtinTemplateFor } from "./template";
export { findLlamaTool } from "./locate";
export { readKeyFile, apiKeyOf, KEY_FILE_MAX_BYTES, type KeyFile } from "./key-file";
export { LlamaChild, freePort, checkPortFree, listeningPort, waitHealthy, crashCause, tiedToParent, type ExitInfo, type ChildOptions } from "./child";
export { startServer, launch, preparerFor, asStore, commonArgs, isLoopback, bindingFromArgs, type PassThroughBinding, type LaunchOptions, type StartServerOptions, type RunningServer, type SingleServer } from "./server";
export { startRouter, prepareRouterModels, presetSection, presetName, llamaCanonicalName, withoutStopWords, type StartRouterOptions, type RouterServer, type RouterModel } from "./router";
