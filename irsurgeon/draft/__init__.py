"""draft: the family protocol, what a family gives the build, and the build (load, assemble, stream, save). Imports core/, ir/, commit/, weights/, quant/, ops/."""
