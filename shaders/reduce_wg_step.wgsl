            {
            let r = (b + {{OFF}}u + l) * {{LANES}}u;
{{BODY}}
{{COMBINE}}
            }
