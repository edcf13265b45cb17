export { openViews, projectorOf, type FileStatus, type ModelViews, type Mmproj, type ViewsOptions } from "./views";
