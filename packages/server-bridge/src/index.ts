export { BridgeError, type BridgeErrorCode } from "./errors";
export { modelArgs, DEFAULT_NUM_CTX } from "./args";
export { builtinTemplateFor } from "./template";
export { findLlamaTool } from "./locate";
export { LlamaChild, freePort, checkPortFree, waitHealthy, crashCause, tiedToParent, type ExitInfo, type ChildOptions } from "./child";
export { startServer, launch, asStore, commonArgs, isLoopback, bindingFromArgs, type PassThroughBinding, type LaunchOptions, type StartServerOptions, type RunningServer, type SingleServer } from "./server";
export { startRouter, prepareRouterModels, presetSection, presetName, llamaCanonicalName, type StartRouterOptions, type RouterServer, type RouterModel } from "./router";
