// The package's entry for `import … from "@firn/functions"`: the SDK is in assembly/.
export * from "./assembly/index";
