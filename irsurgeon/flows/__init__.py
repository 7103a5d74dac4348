"""flows: the family-neutral work the CLI and the API call (patch, verify, show, genai runs, a draft alone). Imports every folder below; reaches a family only through families.registry."""
